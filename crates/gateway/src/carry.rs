//! A tenant's gateway moving to another host with its tunnels up (issue 8, live move).
//!
//! The enclave's package carries every key; this module makes the untrusted half that rides
//! inside it (authenticated and encrypted with the rest, opaque to the enclave): the IKE
//! engine's established SAs, the secret names, and the ESP counters the data plane keeps.
//!
//! ```text
//!  source: freeze ──▶ export (enclave) ─────────▶ stop ──▶ final replay tops ──┐
//!          (IKE silent, ESP goes on                                            │
//!           under the enclave's cap)                                           ▼
//!  destination:  import (enclave) ─▶ start_moved (same SPIs, IDs, windows) ─▶ raise_windows
//! ```
//!
//! While frozen the source answers no IKE message and starts no exchange, so the message
//! IDs the destination takes over stay the peer's; the peer retransmits anything unanswered
//! and the destination answers it. ESP keeps flowing on the source, inside the sequence
//! numbers the enclave left it (`enclave::migration::SEQ_MARGIN`); the destination starts
//! above them.

use std::collections::BTreeMap;
use std::time::Instant;

use enclave::migration::{MigrationRestore, SEQ_MARGIN};
use enclave::Enclave;
use ike::SaId;
use serde::{Deserialize, Serialize};

use crate::config::GatewayConfig;
use crate::daemon::Gateway;
use crate::error::{Error, Result};

/// The format of [`Carried`]; another version is refused.
const VERSION: u32 = 1;

/// The gateway's untrusted state, as it travels inside the enclave's package.
#[derive(Debug, Serialize, Deserialize)]
struct Carried {
    version: u32,
    /// Configured secret names with the source enclave's handle of each.
    secrets: Vec<(String, u32)>,
    /// The IKE engine's established SAs.
    ike: Vec<ike::CarriedIkeSa>,
    /// Identities shown by `sa list`, by the source's IKE SA number.
    identities: Vec<(u64, String, String)>,
    /// Per child: where its inbound window and outbound counter stood at the freeze.
    esp: Vec<CarriedEsp>,
}

/// One child's ESP counters.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct CarriedEsp {
    spi_in: u32,
    replay_top: u64,
    next_seq: u64,
}

fn moved(why: String) -> Error {
    Error::Config { field: "migration", why }
}

impl<E: Enclave + 'static> Gateway<E> {
    /// Stops IKE (ESP goes on) and returns the untrusted state for the enclave's export.
    /// Refused, and nothing frozen, while an IKE exchange is under way (`ike::Error`'s busy
    /// case): try again a moment later.
    pub fn freeze(&mut self, now: Instant) -> Result<Vec<u8>> {
        let carried = self.engine.export_sas(now).map_err(Error::Ike)?;
        // The destination's enclave cannot open this host's SK_d blobs: SK_d travels in
        // the package and is sealed anew there.
        if let Err(e) = self.engine.unseal_for_move() {
            let _ = self.engine.reseal();
            return Err(Error::Ike(e));
        }
        let esp = self
            .dp
            .read(|sad, _| {
                self.children
                    .iter()
                    .filter_map(|c| {
                        let next_seq = sad.outbound(c.outbound?)?.runtime().peek_seq();
                        let replay_top = sad.inbound(c.child.spi_inbound)?.runtime().window().top();
                        Some(CarriedEsp { spi_in: c.child.spi_inbound, replay_top, next_seq })
                    })
                    .collect()
            })
            .ok_or(Error::Poisoned)?;
        let state = Carried {
            version: VERSION,
            secrets: self.secrets.iter().map(|(n, h)| (n.clone(), h.0)).collect(),
            ike: carried.sas,
            identities: self.identities.iter().map(|(sa, (l, r))| (sa.0, l.clone(), r.clone())).collect(),
            esp,
        };
        let bytes = serde_json::to_vec(&state).map_err(|e| moved(format!("encoding the state: {e}")))?;
        self.frozen = true;
        (self.log)(&format!(
            "move: frozen with {} IKE SA(s), {} child SA(s) ({} half-open left out); ESP goes on",
            state.ike.len(),
            state.esp.len(),
            carried.left_out
        ));
        Ok(bytes)
    }

    /// The untrusted state of a backup ([`enclave::Enclave::export_secrets`]): the secret
    /// names only. A backup carries no SA: restored from a snapshot, an outbound SA would
    /// send sequence numbers (AEAD IVs) the live one already used, so a restored tenant's
    /// peers set up new SAs. [`Self::start_moved`] reads it like a move's state.
    pub fn backup_state(&self) -> Result<Vec<u8>> {
        let state = Carried {
            version: VERSION,
            secrets: self.secrets.iter().map(|(n, h)| (n.clone(), h.0)).collect(),
            ike: Vec::new(),
            identities: Vec::new(),
            esp: Vec::new(),
        };
        serde_json::to_vec(&state).map_err(|e| moved(format!("encoding the backup state: {e}")))
    }

    /// The secrets the enclave holds, by configured name (to seal them for this host's
    /// store after an import: the source's sealed copies do not open here).
    pub fn secret_handles(&self) -> Vec<(String, enclave::SecretHandle)> {
        self.secrets.iter().map(|(n, h)| (n.clone(), *h)).collect()
    }

    /// Whether IKE is frozen for a move.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Takes up IKE again after a move that did not happen. After an export (`capped`)
    /// every child is rekeyed at once: the export capped its outbound sequence numbers, so
    /// it would run dry.
    pub fn thaw(&mut self, now: Instant, capped: bool) {
        self.frozen = false;
        if let Err(e) = self.engine.reseal() {
            (self.log)(&format!("move: sealing SK_d again after the aborted move: {e}"));
        }
        if !capped {
            (self.log)("move: aborted before the export; IKE resumed");
            return;
        }
        let current: Vec<(SaId, u32)> = self
            .children
            .iter()
            .filter(|c| c.outbound.is_some())
            .map(|c| (c.ike, c.child.spi_inbound))
            .collect();
        for (ike, spi) in current {
            if let Err(e) = self.engine.rekey_child(now, ike, spi) {
                (self.log)(&format!("move: rekey of {spi:08x} after the aborted move: {e}"));
            }
        }
        (self.log)("move: aborted; IKE resumed, child SAs rekeying");
        self.flush(now);
    }

    /// The highest sequence number received on each inbound SA (by SPI): what the
    /// destination must treat as seen once the source stops.
    pub fn inbound_tops(&self) -> Vec<(u32, u64)> {
        self.dp
            .read(|sad, _| {
                self.children
                    .iter()
                    .filter_map(|c| {
                        let spi = c.child.spi_inbound;
                        Some((spi, sad.inbound(spi)?.runtime().window().top()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Marks everything up to each `(spi, top)` as seen (the source's last numbers).
    pub fn raise_windows(&self, tops: &[(u32, u64)]) -> usize {
        self.dp
            .read(|sad, _| {
                tops.iter()
                    .filter_map(|(spi, top)| {
                        sad.inbound(*spi)?.runtime().window().mark_seen_through(*top);
                        Some(())
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Starts a gateway on an enclave that imported a moved tenant (`restore`): the
    /// secrets under their names, the IKE SAs and their children as they were at the
    /// source, outbound counters above the source's range, windows past what it saw.
    pub fn start_moved(
        config: &GatewayConfig,
        enclave: E,
        restore: &MigrationRestore,
        log: Box<dyn FnMut(&str) + Send>,
    ) -> Result<Self> {
        let carried: Carried = serde_json::from_slice(&restore.untrusted_state)
            .map_err(|e| moved(format!("the moved gateway state does not parse: {e}")))?;
        if carried.version != VERSION {
            return Err(moved(format!(
                "moved gateway state version {} (this build reads {VERSION})",
                carried.version
            )));
        }
        let handles: BTreeMap<u32, enclave::SecretHandle> =
            restore.secrets.iter().map(|(old, new)| (old.0, *new)).collect();
        let mut given = BTreeMap::new();
        for (name, old) in &carried.secrets {
            let new =
                handles.get(old).ok_or_else(|| moved(format!("secret {name} is not in the package")))?;
            given.insert(name.clone(), *new);
        }
        let mut gw = Self::start_with(config, enclave, given, log)?;
        let now = Instant::now();
        let old_ids: Vec<u64> = carried.ike.iter().map(|c| c.id().0).collect();
        let imported = gw.engine.import_sas(now, carried.ike, restore).map_err(Error::Ike)?;
        let ids: BTreeMap<u64, SaId> = old_ids.into_iter().zip(imported.iter().map(|(sa, _)| *sa)).collect();
        let mut installed = 0;
        for (sa, children) in imported {
            for child in children {
                gw.add_routes(&child);
                gw.children
                    .install(&gw.dp, sa, child, now)
                    .map_err(|e| moved(format!("installing a moved child SA: {e}")))?;
                installed += 1;
            }
        }
        for (old, local, remote) in carried.identities {
            if let Some(sa) = ids.get(&old) {
                gw.identities.insert(*sa, (local, remote));
            }
        }
        let by_spi: BTreeMap<u32, CarriedEsp> = carried.esp.iter().map(|e| (e.spi_in, *e)).collect();
        let outbound: Vec<(esp::OutboundSaId, CarriedEsp)> = gw
            .children
            .iter()
            .filter_map(|c| Some((c.outbound?, *by_spi.get(&c.child.spi_inbound)?)))
            .collect();
        gw.dp
            .read(|sad, _| {
                for (id, e) in &outbound {
                    if let Some(sa) = sad.outbound(*id) {
                        // Above every number the source may still use (the enclave's cap).
                        sa.runtime().set_next_seq(e.next_seq.max(1).saturating_add(SEQ_MARGIN));
                    }
                    if let Some(sa) = sad.inbound(e.spi_in) {
                        sa.runtime().window().mark_seen_through(e.replay_top);
                    }
                }
            })
            .ok_or(Error::Poisoned)?;
        (gw.log)(&format!("move: arrived with {} IKE SA(s), {installed} child SA(s)", ids.len()));
        Ok(gw)
    }
}

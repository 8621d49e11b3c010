//! One supervision path for every daemon that runs a tenant's gateway over an enclave it can
//! lose: `cloister gateway`, and each tenant of `cloister serve`.
//!
//! ```text
//!  after every round: enclave healthy? ──no──▶ log; stop the gateway (its SAs end with it,
//!        │ yes                                 so nothing is listed as up); revive: a fresh
//!        ▼                                     enclave with the tenant's secrets, a new
//!  every CHECK: connections to keep            gateway; if that fails, again after 0.1 s,
//!  that have no IKE SA are initiated           0.2 s, ... up to 30 s between tries
//!  (at most every REINITIATE)
//! ```
//!
//! Connections to keep: those the daemon always wants up (`cloister serve`'s `initiate`),
//! and, after a revival (or a restart of the daemon, from its records), those that were up
//! before it, until they are up again or [`FORGET_AFTER`] has passed. A connection the peer
//! or the operator closed while the enclave lived is not brought back. The daemon supplies
//! what differs ([`Revive`]): how it checks its enclave and how it makes the gateway anew.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use enclave::Enclave;

use crate::Gateway;

/// How often the connections to keep are looked at (the enclave's health: every round).
pub const CHECK: Duration = Duration::from_millis(500);
/// How long after a revival a connection that was up is still brought back.
pub const FORGET_AFTER: Duration = Duration::from_secs(30);
/// How often a connection to keep that has no IKE SA is initiated again.
pub const REINITIATE: Duration = Duration::from_secs(10);
/// The pause before the second revival attempt; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// What a daemon supplies to [`Supervisor::tend`].
pub trait Revive<E: Enclave + 'static> {
    /// `Ok` while the enclave can serve; why not otherwise.
    fn health(&mut self, enclave: &mut E) -> Result<(), String>;
    /// The tenant's gateway anew over a fresh enclave holding the tenant's secrets. `dead`:
    /// the gateway whose enclave died, on the first attempt after the death (the daemon
    /// stops it and takes what it reuses); `None` on later attempts.
    fn revive(&mut self, dead: Option<Gateway<E>>) -> Result<Gateway<E>, Revival>;
}

/// Why a revival failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revival {
    /// What went wrong.
    pub why: String,
    /// Whether another attempt may succeed; if not, the daemon gives the tenant up.
    pub retry: bool,
}

/// What one [`Supervisor::tend`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// The enclave serves.
    Serving,
    /// The enclave had died (`why`) and the tenant serves again, `after` the death.
    Recovered {
        /// Why the enclave could not serve.
        why: String,
        /// From the death (or the first failed start) to the new gateway.
        after: Duration,
    },
    /// No gateway: the enclave died or a revival failed (`why`); the next attempt is due in
    /// `retry_in`.
    Down {
        /// The latest failure.
        why: String,
        /// Until the next attempt.
        retry_in: Duration,
    },
    /// A revival failed for good ([`Revival::retry`] false).
    Failed(String),
}

/// The time of the death and the retry schedule while there is no gateway.
#[derive(Debug, Clone)]
struct Down {
    since: Instant,
    retry_at: Instant,
    pause: Duration,
    why: String,
}

/// The supervision state of one tenant.
#[derive(Debug, Default)]
pub struct Supervisor {
    /// Wanted up at all times.
    always: BTreeSet<String>,
    /// To bring back, each until the instant given.
    restore: BTreeMap<String, Instant>,
    /// Up at the last check.
    up: BTreeSet<String>,
    /// When each connection to keep was last initiated.
    last_initiate: BTreeMap<String, Instant>,
    next_check: Option<Instant>,
    down: Option<Down>,
    /// Connections newly seen up (`true`) or no longer to bring back (`false`), for the
    /// daemon's records.
    changes: Vec<(String, bool)>,
}

impl Supervisor {
    /// Supervision for a tenant whose connections `always` are wanted up at all times.
    pub fn new(always: impl IntoIterator<Item = String>) -> Self {
        Self { always: always.into_iter().collect(), ..Self::default() }
    }

    /// Brings `connection` back as after a revival (the daemon's records say it was up
    /// before the daemon restarted).
    pub fn restore(&mut self, connection: &str, now: Instant) {
        self.restore.insert(connection.to_owned(), now + FORGET_AFTER);
    }

    /// Lets every connection to keep be initiated at the next check (a secret arrived that
    /// their last attempt lacked).
    pub fn initiate_soon(&mut self) {
        self.last_initiate.clear();
        self.next_check = None;
    }

    /// Records a failed first start (the gateway could not be made at all): revivals
    /// follow on the schedule.
    pub fn start_failed(&mut self, why: String, now: Instant) -> Turn {
        let pause = FIRST_PAUSE * 2;
        self.down = Some(Down { since: now, retry_at: now + FIRST_PAUSE, pause, why: why.clone() });
        Turn::Down { why, retry_in: FIRST_PAUSE }
    }

    /// Connections newly seen up (`true`) or no longer to bring back (`false`) since the
    /// last call.
    pub fn take_changes(&mut self) -> Vec<(String, bool)> {
        core::mem::take(&mut self.changes)
    }

    /// After every round of the gateway: checks the enclave and, on its death, stops the
    /// gateway and revives it at once; while there is no gateway, tries again when due;
    /// every [`CHECK`], initiates the connections to keep that have no IKE SA.
    pub fn tend<E: Enclave + 'static>(
        &mut self,
        gw: &mut Option<Gateway<E>>,
        daemon: &mut impl Revive<E>,
        now: Instant,
    ) -> Turn {
        if let Some(g) = gw.as_mut() {
            let health = daemon.health(&mut g.enclave().lock());
            match health {
                Ok(()) => {
                    if self.next_check.is_none_or(|t| now >= t) {
                        self.next_check = Some(now + CHECK);
                        self.keep_up(g, now);
                    }
                    return Turn::Serving;
                }
                Err(why) => {
                    g.log_line(&format!("enclave died ({why}); its SAs are gone, restarting it"));
                    // What was up comes back; what was already closed stays closed.
                    let until = now + FORGET_AFTER;
                    for c in g.established_connections().into_iter().chain(core::mem::take(&mut self.up)) {
                        self.restore.insert(c, until);
                    }
                    self.down = Some(Down { since: now, retry_at: now, pause: FIRST_PAUSE, why });
                    let dead = gw.take();
                    return self.revive(gw, daemon, dead, now);
                }
            }
        }
        match &self.down {
            Some(d) if now < d.retry_at => {
                Turn::Down { why: d.why.clone(), retry_in: d.retry_at.saturating_duration_since(now) }
            }
            _ => self.revive(gw, daemon, None, now),
        }
    }

    fn revive<E: Enclave + 'static>(
        &mut self,
        gw: &mut Option<Gateway<E>>,
        daemon: &mut impl Revive<E>,
        dead: Option<Gateway<E>>,
        now: Instant,
    ) -> Turn {
        let mut down = self.down.take().unwrap_or(Down {
            since: now,
            retry_at: now,
            pause: FIRST_PAUSE,
            why: "not started".into(),
        });
        match daemon.revive(dead) {
            Ok(mut g) => {
                self.last_initiate.clear();
                self.next_check = Some(now + CHECK);
                // Move the restore deadlines to the revival: the old ones ran while down.
                let until = now + FORGET_AFTER;
                for t in self.restore.values_mut() {
                    *t = (*t).max(until);
                }
                self.keep_up(&mut g, now);
                *gw = Some(g);
                // Measured to now: the revival itself is most of it.
                Turn::Recovered { why: down.why, after: down.since.elapsed() }
            }
            Err(Revival { why, retry: false }) => Turn::Failed(why),
            Err(Revival { why, retry: true }) => {
                let retry_in = down.pause;
                down.pause = (retry_in * 2).min(MAX_PAUSE);
                down.retry_at = now + retry_in;
                down.why = why.clone();
                self.down = Some(down);
                Turn::Down { why, retry_in }
            }
        }
    }

    /// Initiates the connections to keep that have no IKE SA, each at most every
    /// [`REINITIATE`]; forgets restore entries that are up again or expired.
    fn keep_up<E: Enclave + 'static>(&mut self, gw: &mut Gateway<E>, now: Instant) {
        let up = gw.established_connections();
        for c in up.difference(&self.up) {
            self.changes.push((c.clone(), true));
        }
        let gone: Vec<String> = self
            .restore
            .iter()
            .filter(|(c, until)| up.contains(*c) || now >= **until)
            .map(|(c, _)| c.clone())
            .collect();
        for c in gone {
            self.restore.remove(&c);
            if !up.contains(&c) && !self.always.contains(&c) {
                self.changes.push((c, false));
            }
        }
        for c in self.up.difference(&up) {
            // Closed while the enclave lived: not brought back (unless always wanted).
            if !self.always.contains(c) && !self.restore.contains_key(c) {
                self.changes.push((c.clone(), false));
            }
        }
        self.up = up;
        let pending = gw.connections_with_sa();
        let targets: Vec<String> = self.always.iter().chain(self.restore.keys()).cloned().collect();
        for c in targets {
            if self.up.contains(&c) || pending.contains(&c) {
                continue;
            }
            if self.last_initiate.get(&c).is_some_and(|t| now.duration_since(*t) < REINITIATE) {
                continue;
            }
            self.last_initiate.insert(c.clone(), now);
            match gw.initiate(now, &c) {
                Ok(sa) => gw.log_line(&format!("initiating {c} as IKE SA #{}", sa.0)),
                Err(e) => gw.log_line(&format!("initiating {c}: {e}")),
            }
        }
    }
}

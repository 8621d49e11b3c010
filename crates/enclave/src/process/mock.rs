//! A no-crypto [`Enclave`] with an in-memory ESP SA table, for driving the guest's ring
//! loop in unit tests and the fuzz target fast and deterministically. Its handles follow
//! the real tables' format (tag, generation, index) and its refusals the real statuses; its
//! "transform" flips the packet bytes so a test can see which bytes it touched.

use crate::attest::Evidence;
use crate::provision::ProvisioningOffer;
use core::ops::Range;
use enclave_api::alg::{AuthMethod, DhGroup, SecretKind};
use enclave_api::error::{Error, Result};
use enclave_api::esp::{BatchSummary, EspDescriptor, EspOpcode, EspStatus};
use enclave_api::handle::{DhHandle, EspSaHandle, HandleKind, IkeSaHandle, SecretHandle, TenantId};
use enclave_api::ike::{
    AuthInput, AuthSpec, AuthVerified, ChildSaPair, ChildSaParams, DhExchange, EstablishSeal, IkeSaParams,
    PeerCredential, SealedBlob,
};
use enclave_api::report::{Counters, MemoryReport};
use enclave_api::Enclave;

/// The tag of every handle the mock issues.
pub const MOCK_TAG: u8 = 0x42;

/// One mock SA direction.
#[derive(Debug, Clone, Copy)]
struct Sa {
    outbound: bool,
    generation: u8,
    live: bool,
}

/// The mock enclave.
#[derive(Debug, Default)]
pub struct MockEnclave {
    sas: Vec<Sa>,
    counters: Counters,
    /// Most descriptors per batch.
    pub max_batch: usize,
}

impl MockEnclave {
    /// An empty mock accepting batches of up to `max_batch`.
    pub fn new(max_batch: usize) -> Self {
        Self { sas: Vec::new(), counters: Counters::default(), max_batch }
    }

    fn handle(index: usize, generation: u8) -> u32 {
        (u32::from(MOCK_TAG) << 24)
            | (u32::from(generation) << 16)
            | (u32::try_from(index).unwrap_or(0) & 0xffff)
    }

    fn add(&mut self, outbound: bool) -> EspSaHandle {
        if let Some((i, sa)) = self.sas.iter_mut().enumerate().find(|(_, s)| !s.live) {
            *sa = Sa { outbound, generation: sa.generation, live: true };
            return EspSaHandle(Self::handle(i, sa.generation));
        }
        self.sas.push(Sa { outbound, generation: 0, live: true });
        EspSaHandle(Self::handle(self.sas.len() - 1, 0))
    }

    fn find(&self, h: u32) -> core::result::Result<(usize, Sa), EspStatus> {
        if h.to_be_bytes()[0] != MOCK_TAG {
            return Err(EspStatus::ForeignSa);
        }
        let i = (h & 0xffff) as usize;
        match self.sas.get(i) {
            Some(s) if s.live && s.generation == h.to_be_bytes()[1] => Ok((i, *s)),
            _ => Err(EspStatus::UnknownSa),
        }
    }

    fn one(&self, packets: &mut [u8], d: &EspDescriptor) -> EspStatus {
        let outbound = match d.opcode {
            EspOpcode::ENCRYPT => true,
            EspOpcode::DECRYPT | EspOpcode::DECRYPT_FORWARD => false,
            _ => return EspStatus::UnknownOpcode,
        };
        let sa = match self.find(d.sa.0) {
            Ok((_, sa)) => sa,
            Err(s) => return s,
        };
        if sa.outbound != outbound {
            return EspStatus::WrongDirection;
        }
        let start = d.offset as usize;
        let Some(region) = start.checked_add(d.len as usize).and_then(|end| packets.get_mut(start..end))
        else {
            return EspStatus::OutOfBounds;
        };
        for b in region {
            *b ^= 0xff;
        }
        EspStatus::Ok
    }
}

fn unsupported<T>() -> Result<T> {
    Err(Error::Unsupported { what: "mock enclave operation", value: 0 })
}

impl Enclave for MockEnclave {
    fn tenant(&self) -> TenantId {
        TenantId(1)
    }
    fn identity_evidence(&mut self, _: &[u8; 32]) -> Result<Evidence> {
        unsupported()
    }
    fn memory_report(&self) -> MemoryReport {
        MemoryReport { esp_sas: self.sas.iter().filter(|s| s.live).count(), ..MemoryReport::default() }
    }
    fn counters(&self) -> Counters {
        self.counters
    }
    fn provision_secret(&mut self, _: &[u8]) -> Result<SecretHandle> {
        unsupported()
    }
    fn provisioning_offer(&mut self) -> Result<ProvisioningOffer> {
        unsupported()
    }
    fn provision_attested(&mut self, _: &[u8]) -> Result<(SecretHandle, SealedBlob)> {
        unsupported()
    }
    fn unseal_secret(&mut self, _: &SealedBlob) -> Result<SecretHandle> {
        unsupported()
    }
    fn secret_kind(&mut self, _: SecretHandle) -> Result<SecretKind> {
        unsupported()
    }
    fn delete_secret(&mut self, s: SecretHandle) -> Result<()> {
        Err(Error::UnknownHandle { kind: HandleKind::Secret, handle: s.0 })
    }
    fn random_nonce(&mut self, out: &mut [u8]) -> Result<()> {
        if !(16..=256).contains(&out.len()) {
            return Err(Error::BadLength { what: "nonce", len: out.len(), why: "must be 16..=256 bytes" });
        }
        out.fill(0x4e);
        Ok(())
    }
    fn ike_nonces(&mut self, _: &mut [u8]) -> Result<()> {
        unsupported()
    }
    fn dh_generate(&mut self, _: DhGroup, _: &mut [u8]) -> Result<DhHandle> {
        unsupported()
    }
    fn ike_sa_rekey_additional(
        &mut self,
        _: IkeSaHandle,
        _: Option<&SealedBlob>,
        _: &[DhExchange<'_>],
        _: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        unsupported()
    }
    fn ke_respond(&mut self, _: DhGroup, _: &[u8], _: &mut [u8]) -> Result<DhHandle> {
        unsupported()
    }
    fn ike_sa_intermediate(
        &mut self,
        _: IkeSaHandle,
        _: DhExchange<'_>,
        _: &enclave_api::IntermediateExchange<'_>,
    ) -> Result<()> {
        unsupported()
    }
    fn dh_delete(&mut self, dh: DhHandle) -> Result<()> {
        Err(Error::UnknownHandle { kind: HandleKind::Dh, handle: dh.0 })
    }
    fn ike_sa_create(&mut self, _: DhExchange<'_>, _: &IkeSaParams<'_>) -> Result<IkeSaHandle> {
        unsupported()
    }
    fn ike_sa_rekey(
        &mut self,
        _: IkeSaHandle,
        _: Option<&SealedBlob>,
        _: DhExchange<'_>,
        _: &IkeSaParams<'_>,
    ) -> Result<IkeSaHandle> {
        unsupported()
    }
    fn auth_compute(
        &mut self,
        _: IkeSaHandle,
        _: SecretHandle,
        _: AuthSpec,
        _: &AuthInput<'_>,
        _: &mut [u8],
    ) -> Result<(AuthMethod, usize)> {
        unsupported()
    }
    fn auth_verify(
        &mut self,
        _: IkeSaHandle,
        _: PeerCredential<'_>,
        _: u8,
        _: &[u8],
        _: &AuthInput<'_>,
    ) -> Result<AuthVerified> {
        unsupported()
    }
    fn sk_encrypt(&mut self, _: IkeSaHandle, _: &mut [u8], _: usize, _: usize) -> Result<()> {
        unsupported()
    }
    fn sk_decrypt(&mut self, _: IkeSaHandle, _: &mut [u8], _: usize) -> Result<Range<usize>> {
        unsupported()
    }
    /// Installs a new SA pair (no keys: the mock does no crypto).
    fn child_sa_create(
        &mut self,
        _: IkeSaHandle,
        _: Option<&SealedBlob>,
        _: Option<DhExchange<'_>>,
        _: &ChildSaParams<'_>,
    ) -> Result<ChildSaPair> {
        if self.sas.len() >= 64 && self.sas.iter().all(|s| s.live) {
            return Err(Error::TableFull { kind: HandleKind::EspSa, max: 64 });
        }
        let inbound = self.add(false);
        let outbound = self.add(true);
        Ok(ChildSaPair { inbound, outbound })
    }
    fn clear_and_seal(&mut self, _: IkeSaHandle) -> Result<SealedBlob> {
        unsupported()
    }
    fn ike_sa_seal_state(&mut self, _: IkeSaHandle) -> Result<SealedBlob> {
        unsupported()
    }
    fn establish_seal(&mut self, _: IkeSaHandle) -> Result<EstablishSeal> {
        unsupported()
    }
    fn ike_sa_restore(&mut self, _: &SealedBlob) -> Result<IkeSaHandle> {
        unsupported()
    }
    fn ike_sa_delete(&mut self, ike: IkeSaHandle) -> Result<()> {
        Err(Error::UnknownHandle { kind: HandleKind::IkeSa, handle: ike.0 })
    }
    fn esp_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Result<BatchSummary> {
        if descriptors.len() > self.max_batch {
            return Err(Error::BatchTooLarge { descriptors: descriptors.len(), max: self.max_batch });
        }
        if status.len() != descriptors.len() {
            return Err(Error::StatusLengthMismatch { descriptors: descriptors.len(), status: status.len() });
        }
        self.counters.batches += 1;
        let mut sum = BatchSummary::default();
        for (d, s) in descriptors.iter().zip(status.iter_mut()) {
            *s = self.one(packets, d);
            if let Some(c) = self.counters.esp.get_mut(s.index()) {
                *c += 1;
            }
            if *s == EspStatus::Ok {
                sum.ok += 1;
            } else {
                sum.failed += 1;
            }
        }
        Ok(sum)
    }
    fn esp_sa_delete(&mut self, sa: EspSaHandle) -> Result<()> {
        let (i, _) = self.find(sa.0).map_err(|s| match s {
            EspStatus::ForeignSa => Error::ForeignHandle { kind: HandleKind::EspSa, handle: sa.0 },
            _ => Error::UnknownHandle { kind: HandleKind::EspSa, handle: sa.0 },
        })?;
        if let Some(s) = self.sas.get_mut(i) {
            s.live = false;
            s.generation = s.generation.wrapping_add(1);
        }
        Ok(())
    }
}

//! Proposals in strongSwan's syntax (`aes256gcm16-prfsha256-ecp256`), their SA payloads,
//! and the choice among a peer's proposals (RFC 7296 §2.7, §3.3).
//!
//! A proposal string is algorithm keywords joined by `-`; a keyword of a type already seen
//! adds an alternative (`aes128-aes256-sha256-modp3072-ecp256`). Several proposals go in a
//! list (or one string separated by commas), most preferred first; `default` stands for
//! [`DEFAULT_IKE`] or [`DEFAULT_ESP`]. As in strongSwan, an IKE proposal without a PRF takes
//! the PRF of each integrity algorithm (`aes256-sha256-modp3072` gets `prfsha256`); an AEAD
//! IKE proposal must name its PRF.
//!
//! Only what the enclave implements is accepted: AES-CBC-128/256 with HMAC-SHA2, AES-GCM-16
//! 128/256, ChaCha20-Poly1305, PRF HMAC-SHA2-256/384/512, MODP 2048/3072, ECP 256/384 and
//! Curve25519, and, as RFC 9370 additional key exchanges of IKE proposals in strongSwan 6's
//! syntax (`ke1_mlkem768` .. `ke7_...`, `keN_none` making one optional), ML-KEM-768/1024 or
//! any of those groups. Keywords strongSwan knows but the enclave does not (`aes192`, `sha1`,
//! `modp1024`, ...) are refused as unsupported, others as unknown.
//!
//! Selection (responder): the peer's proposals are tried in *its* order, each against our
//! proposals in our order; within one pair each transform type takes the first of the
//! peer's transforms that our proposal allows. The answer is one proposal with the peer's
//! proposal number and exactly one transform per type (§3.3.1).

use enclave::{Cipher, DhGroup, Integ, Prf, Suite};
use wire::ike::{self as w, Proposal, ProtocolId, Sa, Transform, TransformId, TransformType};

use crate::error::{Error, Result};

/// The IKE proposal `default` stands for.
pub const DEFAULT_IKE: &str =
    "aes256gcm16-aes128gcm16-chacha20poly1305-prfsha256-prfsha384-x25519-ecp256-ecp384-modp3072,\
aes256-aes128-sha256-sha384-x25519-ecp256-ecp384-modp3072";
/// The ESP proposal `default` stands for.
pub const DEFAULT_ESP: &str = "aes256gcm16-aes128gcm16-chacha20poly1305,aes256-aes128-sha256-sha384";

/// One IKE proposal: alternatives for each transform type, in preference order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IkeProposal {
    /// Encryption algorithms (all AEAD, or all not).
    pub ciphers: Vec<Cipher>,
    /// Integrity algorithms: empty exactly when the ciphers are AEADs.
    pub integs: Vec<Integ>,
    /// Pseudorandom functions, at least one.
    pub prfs: Vec<Prf>,
    /// Diffie-Hellman groups, at least one; the first is what the initiator's KE uses.
    pub groups: Vec<DhGroup>,
    /// RFC 9370 additional key exchanges 1..=7 (Transform Types 6..=12), done in
    /// IKE_INTERMEDIATE after IKE_SA_INIT: per slot its alternatives, `None` standing for
    /// NONE (the slot is optional); an empty slot is not proposed.
    pub additional: [Vec<Option<DhGroup>>; MAX_ADDITIONAL],
}

/// How many additional key exchanges RFC 9370 defines.
pub const MAX_ADDITIONAL: usize = 7;

/// The additional key exchanges a negotiation settled on, by slot (`None`: not done).
pub type AdditionalKes = [Option<DhGroup>; MAX_ADDITIONAL];

/// The Transform Type of additional key exchange slot `i` (0-based).
fn addke_type(i: usize) -> TransformType {
    TransformType(6 + u8::try_from(i).unwrap_or(0))
}

/// One ESP proposal: alternatives for each transform type, in preference order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EspProposal {
    /// Encryption algorithms (all AEAD, or all not).
    pub ciphers: Vec<Cipher>,
    /// Integrity algorithms: empty exactly when the ciphers are AEADs.
    pub integs: Vec<Integ>,
    /// PFS groups for CREATE_CHILD_SA; empty for none. Never sent in IKE_AUTH (§1.2).
    pub groups: Vec<DhGroup>,
    /// Extended sequence numbers: `false` for 32-bit, `true` for ESN; at least one.
    pub esn: Vec<bool>,
}

/// What an IKE SA negotiation settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IkeChoice {
    /// Encryption and integrity of the SK payloads.
    pub suite: Suite,
    /// The PRF.
    pub prf: Prf,
    /// The DH group.
    pub group: DhGroup,
    /// The additional key exchanges (RFC 9370), in slot order.
    pub additional: AdditionalKes,
}

impl IkeChoice {
    /// A choice without additional key exchanges.
    pub fn new(suite: Suite, prf: Prf, group: DhGroup) -> Self {
        Self { suite, prf, group, additional: [None; MAX_ADDITIONAL] }
    }

    /// The additional key exchanges to do, in order.
    pub fn additional_kes(&self) -> impl Iterator<Item = DhGroup> + '_ {
        self.additional.iter().flatten().copied()
    }
}

/// What a child SA negotiation settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EspChoice {
    /// Encryption and integrity of the ESP packets.
    pub suite: Suite,
    /// Whether the SA uses 64-bit extended sequence numbers.
    pub esn: bool,
    /// The PFS group, if any.
    pub group: Option<DhGroup>,
}

/// The type of a keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keyword {
    Cipher(Cipher),
    Integ(Integ),
    Prf(Prf),
    Group(DhGroup),
    /// `keN_<group>` / `keN_none`: additional key exchange slot N-1.
    Additional(usize, Option<DhGroup>),
    Esn(bool),
}

/// Maps an implemented keyword.
fn keyword(token: &str) -> Option<Keyword> {
    use Keyword as K;
    if let Some((slot, method)) = token.strip_prefix("ke").and_then(|t| t.split_once('_')) {
        let slot: usize = slot.parse().ok().filter(|n| (1..=MAX_ADDITIONAL).contains(n))?;
        return match method {
            "none" => Some(K::Additional(slot - 1, None)),
            m => match keyword(m)? {
                K::Group(g) => Some(K::Additional(slot - 1, Some(g))),
                _ => None,
            },
        };
    }
    Some(match token {
        "aes128" | "aes" => K::Cipher(Cipher::AesCbc128),
        "aes256" => K::Cipher(Cipher::AesCbc256),
        "aes128gcm16" | "aes128gcm128" | "aes128gcm" => K::Cipher(Cipher::AesGcm16_128),
        "aes256gcm16" | "aes256gcm128" | "aes256gcm" => K::Cipher(Cipher::AesGcm16_256),
        "chacha20poly1305" => K::Cipher(Cipher::ChaCha20Poly1305),
        "sha256" | "sha2_256" => K::Integ(Integ::HmacSha256_128),
        "sha384" | "sha2_384" => K::Integ(Integ::HmacSha384_192),
        "sha512" | "sha2_512" => K::Integ(Integ::HmacSha512_256),
        "prfsha256" => K::Prf(Prf::HmacSha256),
        "prfsha384" => K::Prf(Prf::HmacSha384),
        "prfsha512" => K::Prf(Prf::HmacSha512),
        "modp2048" => K::Group(DhGroup::Modp2048),
        "modp3072" => K::Group(DhGroup::Modp3072),
        "ecp256" => K::Group(DhGroup::EcpP256),
        "ecp384" => K::Group(DhGroup::EcpP384),
        "x25519" | "curve25519" => K::Group(DhGroup::Curve25519),
        "mlkem768" => K::Group(DhGroup::MlKem768),
        "mlkem1024" => K::Group(DhGroup::MlKem1024),
        "esn" => K::Esn(true),
        "noesn" => K::Esn(false),
        _ => return None,
    })
}

/// Whether strongSwan knows the keyword (so that refusing it is "unsupported", not
/// "unknown"): its other ciphers, integrity algorithms, PRFs and groups.
fn known_elsewhere(token: &str) -> bool {
    const EXACT: &[&str] = &[
        "aes192",
        "3des",
        "des",
        "cast128",
        "blowfish",
        "blowfish128",
        "blowfish192",
        "blowfish256",
        "null",
        "sha",
        "sha1",
        "md5",
        "md5_128",
        "sha1_160",
        "sha256_96",
        "aesxcbc",
        "aescmac",
        "prfsha1",
        "prfmd5",
        "prfaesxcbc",
        "prfaescmac",
        "modp768",
        "modp1024",
        "modp1536",
        "modp4096",
        "modp6144",
        "modp8192",
        "modp1024s160",
        "modp2048s224",
        "modp2048s256",
        "ecp192",
        "ecp224",
        "ecp521",
        "ecp224bp",
        "ecp256bp",
        "ecp384bp",
        "ecp512bp",
        "x448",
        "curve448",
        "ntru112",
        "ntru128",
        "ntru192",
        "ntru256",
        "newhope128",
        "mlkem512",
        "none",
        "chacha20poly1305compat",
    ];
    if EXACT.contains(&token) {
        return true;
    }
    // An additional key exchange of a method strongSwan has and the enclave not.
    if let Some((slot, method)) = token.strip_prefix("ke").and_then(|t| t.split_once('_')) {
        return slot.parse::<usize>().is_ok_and(|n| (1..=MAX_ADDITIONAL).contains(&n))
            && known_elsewhere(method);
    }
    // AES and Camellia in their other modes and ICV sizes: aes192gcm16, aes128ccm12,
    // aes256ctr, aes128gmac, camellia256, camellia128ctr, ...
    ["aes128", "aes192", "aes256", "camellia128", "camellia192", "camellia256", "camellia"]
        .iter()
        .filter_map(|p| token.strip_prefix(p))
        .any(|mode| {
            ["", "ctr", "gmac", "xcbc"].contains(&mode)
                || ["gcm", "ccm"].iter().any(|m| {
                    mode.strip_prefix(m)
                        .is_some_and(|icv| ["", "8", "12", "16", "64", "96", "128"].contains(&icv))
                })
        })
}

/// The keywords of one proposal, checked.
struct Parsed {
    ciphers: Vec<Cipher>,
    integs: Vec<Integ>,
    prfs: Vec<Prf>,
    groups: Vec<DhGroup>,
    additional: [Vec<Option<DhGroup>>; MAX_ADDITIONAL],
    esn: Vec<bool>,
}

/// Splits one proposal into keywords, refusing unknown, unsupported and mixed ones.
fn parse_keywords(proposal: &str) -> Result<Parsed> {
    let mut p = Parsed {
        ciphers: vec![],
        integs: vec![],
        prfs: vec![],
        groups: vec![],
        additional: Default::default(),
        esn: vec![],
    };
    for token in proposal.split('-') {
        let token = token.trim();
        let lower = token.to_ascii_lowercase();
        let Some(k) = keyword(&lower) else {
            let (proposal, token) = (proposal.to_owned(), token.to_owned());
            return Err(if token.is_empty() {
                Error::InvalidProposal { proposal, why: "empty algorithm keyword" }
            } else if known_elsewhere(&lower) {
                Error::UnsupportedAlgorithm { proposal, token }
            } else {
                Error::UnknownAlgorithm { proposal, token }
            });
        };
        match k {
            Keyword::Cipher(c) => push_unique(&mut p.ciphers, c),
            Keyword::Integ(i) => push_unique(&mut p.integs, i),
            Keyword::Prf(f) => push_unique(&mut p.prfs, f),
            Keyword::Group(g) => push_unique(&mut p.groups, g),
            Keyword::Additional(slot, g) => push_unique(&mut p.additional[slot], g),
            Keyword::Esn(e) => push_unique(&mut p.esn, e),
        }
    }
    let aead = p.ciphers.iter().filter(|c| c.is_aead()).count();
    if aead != 0 && aead != p.ciphers.len() {
        return Err(Error::InvalidProposal {
            proposal: proposal.to_owned(),
            why: "AEAD and non-AEAD ciphers cannot share a proposal",
        });
    }
    if p.ciphers.is_empty() {
        return Err(Error::IncompleteProposal {
            proposal: proposal.to_owned(),
            missing: "no encryption algorithm",
        });
    }
    let is_aead = aead != 0;
    if is_aead && !p.integs.is_empty() {
        return Err(Error::InvalidProposal {
            proposal: proposal.to_owned(),
            why: "an AEAD cipher takes no integrity algorithm",
        });
    }
    if !is_aead && p.integs.is_empty() {
        return Err(Error::IncompleteProposal {
            proposal: proposal.to_owned(),
            missing: "a non-AEAD cipher needs an integrity algorithm",
        });
    }
    Ok(p)
}

/// Appends unless already present (a repeated keyword adds nothing).
fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

/// Splits a list entry at commas, expanding `default`.
fn split_list<'a>(entries: &'a [&'a str], default: &'static str) -> impl Iterator<Item = &'a str> + 'a {
    entries.iter().flat_map(move |e| e.split(',')).flat_map(move |p| {
        let p = p.trim();
        let expanded: Vec<&'a str> =
            if p.eq_ignore_ascii_case("default") { default.split(',').collect() } else { vec![p] };
        expanded
    })
}

impl IkeProposal {
    /// Parses one IKE proposal in strongSwan syntax.
    pub fn parse(proposal: &str) -> Result<Self> {
        let p = parse_keywords(proposal)?;
        if !p.esn.is_empty() {
            return Err(Error::InvalidProposal {
                proposal: proposal.to_owned(),
                why: "esn/noesn apply to ESP proposals only",
            });
        }
        let mut prfs = p.prfs;
        if prfs.is_empty() {
            // strongSwan: the PRF follows each integrity algorithm.
            for integ in &p.integs {
                push_unique(
                    &mut prfs,
                    match integ {
                        Integ::HmacSha384_192 => Prf::HmacSha384,
                        Integ::HmacSha512_256 => Prf::HmacSha512,
                        _ => Prf::HmacSha256,
                    },
                );
            }
        }
        if prfs.is_empty() {
            return Err(Error::IncompleteProposal {
                proposal: proposal.to_owned(),
                missing: "an AEAD IKE proposal needs a PRF (e.g. prfsha256)",
            });
        }
        if p.groups.is_empty() {
            return Err(Error::IncompleteProposal {
                proposal: proposal.to_owned(),
                missing: "an IKE proposal needs a DH group (e.g. ecp256, x25519, modp3072)",
            });
        }
        if p.groups.iter().any(|g| g.is_kem()) {
            return Err(Error::InvalidProposal {
                proposal: proposal.to_owned(),
                why:
                    "ML-KEM goes in an additional key exchange (e.g. x25519-ke1_mlkem768), not IKE_SA_INIT's",
            });
        }
        if p.additional.iter().any(|slot| slot == &[None]) {
            return Err(Error::InvalidProposal {
                proposal: proposal.to_owned(),
                why: "an additional key exchange of only `none` proposes nothing: name a method",
            });
        }
        Ok(Self { ciphers: p.ciphers, integs: p.integs, prfs, groups: p.groups, additional: p.additional })
    }

    /// Parses a list of proposals (entries may hold several, separated by commas;
    /// `default` expands to [`DEFAULT_IKE`]).
    pub fn parse_list(entries: &[&str]) -> Result<Vec<Self>> {
        let list = split_list(entries, DEFAULT_IKE).map(Self::parse).collect::<Result<Vec<_>>>()?;
        if list.is_empty() {
            return Err(Error::IncompleteProposal { proposal: String::new(), missing: "no proposal" });
        }
        Ok(list)
    }

    /// This proposal as an SA payload proposal numbered `number`, for IKE_SA_INIT (no SPI).
    pub fn to_wire(&self, number: u8) -> Proposal {
        let mut transforms: Vec<Transform> = self.ciphers.iter().map(|c| cipher_transform(*c)).collect();
        transforms.extend(self.prfs.iter().map(|p| Transform::new(TransformId::Prf(w::PrfId(p.id())))));
        transforms.extend(self.integs.iter().map(|i| integ_transform(*i)));
        transforms.extend(self.groups.iter().map(|g| Transform::new(TransformId::Ke(w::DhGroup(g.id())))));
        for (i, slot) in self.additional.iter().enumerate() {
            transforms.extend(slot.iter().map(|g| addke_transform(i, *g)));
        }
        Proposal { number, protocol: ProtocolId::IKE, transforms, ..Proposal::default() }
    }

    /// Whether this proposal asks for additional key exchanges (RFC 9370).
    pub fn has_additional(&self) -> bool {
        self.additional.iter().any(|slot| !slot.is_empty())
    }

    /// The same proposal without additional key exchanges.
    pub fn without_additional(&self) -> Self {
        Self { additional: Default::default(), ..self.clone() }
    }

    /// Every suite this proposal allows.
    fn suites(&self) -> impl Iterator<Item = Suite> + '_ {
        suites(&self.ciphers, &self.integs)
    }
}

impl EspProposal {
    /// Parses one ESP proposal in strongSwan syntax (no PRF; `esn`/`noesn`, default `noesn`).
    pub fn parse(proposal: &str) -> Result<Self> {
        let p = parse_keywords(proposal)?;
        if !p.prfs.is_empty() {
            return Err(Error::InvalidProposal {
                proposal: proposal.to_owned(),
                why: "ESP proposals take no PRF",
            });
        }
        if p.additional.iter().any(|slot| !slot.is_empty()) || p.groups.iter().any(|g| g.is_kem()) {
            return Err(Error::UnsupportedAlgorithm {
                proposal: proposal.to_owned(),
                token: "additional key exchanges or ML-KEM in ESP proposals (IKE_FOLLOWUP_KE)".to_owned(),
            });
        }
        let esn = if p.esn.is_empty() { vec![false] } else { p.esn };
        Ok(Self { ciphers: p.ciphers, integs: p.integs, groups: p.groups, esn })
    }

    /// Parses a list of proposals (entries may hold several, separated by commas;
    /// `default` expands to [`DEFAULT_ESP`]).
    pub fn parse_list(entries: &[&str]) -> Result<Vec<Self>> {
        let list = split_list(entries, DEFAULT_ESP).map(Self::parse).collect::<Result<Vec<_>>>()?;
        if list.is_empty() {
            return Err(Error::IncompleteProposal { proposal: String::new(), missing: "no proposal" });
        }
        Ok(list)
    }

    /// This proposal as an SA payload proposal numbered `number` with our inbound `spi`;
    /// KE transforms only when `with_groups` (CREATE_CHILD_SA with PFS, never IKE_AUTH).
    pub fn to_wire(&self, number: u8, spi: u32, with_groups: bool) -> Proposal {
        let mut transforms: Vec<Transform> = self.ciphers.iter().map(|c| cipher_transform(*c)).collect();
        transforms.extend(self.integs.iter().map(|i| integ_transform(*i)));
        if with_groups {
            transforms
                .extend(self.groups.iter().map(|g| Transform::new(TransformId::Ke(w::DhGroup(g.id())))));
        }
        transforms.extend(self.esn.iter().map(|e| esn_transform(*e)));
        Proposal {
            number,
            protocol: ProtocolId::ESP,
            spi: spi.to_be_bytes().to_vec(),
            transforms,
            ..Proposal::default()
        }
    }

    /// Every suite this proposal allows.
    fn suites(&self) -> impl Iterator<Item = Suite> + '_ {
        suites(&self.ciphers, &self.integs)
    }
}

/// The suites of a cipher list and an integrity list (AEADs alone, CBC with each integ).
fn suites<'a>(ciphers: &'a [Cipher], integs: &'a [Integ]) -> impl Iterator<Item = Suite> + 'a {
    ciphers.iter().flat_map(move |c| {
        let v: Vec<Suite> = if c.is_aead() {
            vec![Suite::aead(*c)]
        } else {
            integs.iter().map(|i| Suite::cbc(*c, *i)).collect()
        };
        v
    })
}

/// The SA payload of a list of IKE proposals, numbered from 1.
pub fn ike_sa_payload(proposals: &[IkeProposal]) -> Sa {
    Sa { proposals: proposals.iter().zip(1..=u8::MAX).map(|(p, n)| p.to_wire(n)).collect() }
}

/// The SA payload of a list of IKE proposals for a CREATE_CHILD_SA that rekeys the IKE SA
/// (RFC 7296 §1.3.2): numbered from 1, each with our SPI of the new IKE SA.
pub fn ike_rekey_sa_payload(proposals: &[IkeProposal], spi: u64) -> Sa {
    let mut sa = ike_sa_payload(proposals);
    for p in &mut sa.proposals {
        p.spi = spi.to_be_bytes().to_vec();
    }
    sa
}

/// The SA payload of a list of ESP proposals, numbered from 1, all with our inbound SPI.
pub fn esp_sa_payload(proposals: &[EspProposal], spi: u32, with_groups: bool) -> Sa {
    Sa { proposals: proposals.iter().zip(1..=u8::MAX).map(|(p, n)| p.to_wire(n, spi, with_groups)).collect() }
}

/// The ENCR transform of a cipher, with its Key Length attribute where it has one.
fn cipher_transform(c: Cipher) -> Transform {
    let id = TransformId::Encr(w::EncrId(c.id()));
    match c {
        Cipher::AesCbc128 | Cipher::AesGcm16_128 => Transform::with_key_length(id, 128),
        Cipher::AesCbc256 | Cipher::AesGcm16_256 => Transform::with_key_length(id, 256),
        _ => Transform::new(id),
    }
}

/// The transform of additional key exchange slot `i` (NONE for `None`).
fn addke_transform(i: usize, g: Option<DhGroup>) -> Transform {
    Transform::new(TransformId::Other { ty: addke_type(i), id: g.map_or(0, DhGroup::id) })
}

/// The INTEG transform of an integrity algorithm.
fn integ_transform(i: Integ) -> Transform {
    Transform::new(TransformId::Integ(w::IntegId(i.id())))
}

/// The ESN transform.
fn esn_transform(esn: bool) -> Transform {
    Transform::new(TransformId::Esn(if esn { w::EsnId::ESN } else { w::EsnId::NO_ESN }))
}

/// The cipher a received ENCR transform names, if implemented and its attributes are
/// understood (§3.3.6: a transform with an unknown attribute is not acceptable).
fn cipher_of(t: &Transform) -> Option<Cipher> {
    let TransformId::Encr(id) = t.id else { return None };
    let mut key_bits = 0;
    for a in &t.attributes {
        match (a.ty, &a.value) {
            (w::AttributeType::KEY_LENGTH, w::AttributeValue::Short(bits)) if key_bits == 0 => {
                key_bits = *bits
            }
            _ => return None,
        }
    }
    Cipher::from_id(id.0, key_bits)
}

/// The value of a received transform of a non-ENCR type, if it has no attributes.
fn plain_id(t: &Transform) -> Option<TransformId> {
    t.attributes.is_empty().then_some(t.id)
}

/// The transform types a proposal uses, for the protocol.
fn allowed_types(protocol: ProtocolId) -> &'static [TransformType] {
    if protocol == ProtocolId::IKE {
        &[
            TransformType::ENCR,
            TransformType::PRF,
            TransformType::INTEG,
            TransformType::KE,
            TransformType::ADDKE1,
            TransformType::ADDKE2,
            TransformType::ADDKE3,
            TransformType::ADDKE4,
            TransformType::ADDKE5,
            TransformType::ADDKE6,
            TransformType::ADDKE7,
        ]
    } else {
        &[TransformType::ENCR, TransformType::INTEG, TransformType::KE, TransformType::ESN]
    }
}

/// Whether a received proposal only uses transform types we understand (§3.3.6: a proposal
/// with an unknown transform type is rejected).
fn types_known(p: &Proposal) -> bool {
    let allowed = allowed_types(p.protocol);
    p.transforms.iter().all(|t| allowed.contains(&t.id.ty()))
}

/// The suite to take from a received proposal under our cipher and integrity lists:
/// the peer's ciphers in its order; an AEAD needs no INTEG (or only NONE), CBC takes the
/// peer's first integrity algorithm we allow.
fn pick_suite(p: &Proposal, allowed: &[Suite]) -> Option<Suite> {
    let integs: Vec<Option<Integ>> = p
        .transforms_of(TransformType::INTEG)
        .filter_map(plain_id)
        .map(|id| match id {
            TransformId::Integ(w::IntegId(0)) => None,
            TransformId::Integ(i) => Integ::from_id(i.0),
            _ => None,
        })
        .collect();
    let integ_ids: Vec<u16> = p.transforms_of(TransformType::INTEG).map(|t| t.id.id()).collect();
    for cipher in p.transforms_of(TransformType::ENCR).filter_map(cipher_of) {
        if cipher.is_aead() {
            // RFC 5282 §8: an AEAD proposal has no integrity transform, or only NONE.
            if integ_ids.iter().all(|id| *id == 0) && allowed.contains(&Suite::aead(cipher)) {
                return Some(Suite::aead(cipher));
            }
        } else {
            for integ in integs.iter().flatten() {
                let suite = Suite::cbc(cipher, *integ);
                if allowed.contains(&suite) {
                    return Some(suite);
                }
            }
        }
    }
    None
}

/// The first of the peer's transforms of `ty` that maps into `ours`.
fn pick<T: Copy + PartialEq>(
    p: &Proposal,
    ty: TransformType,
    ours: &[T],
    map: impl Fn(u16) -> Option<T>,
) -> Option<T> {
    p.transforms_of(ty).filter_map(plain_id).filter_map(|id| map(id.id())).find(|x| ours.contains(x))
}

/// The additional key exchanges to take from a received proposal under ours (RFC 9370
/// §2.2.1): per slot the peer's first method we allow; a slot only one side proposes, or
/// neither, is left out when that side allows NONE (or neither proposes it).
fn pick_additional(p: &Proposal, ours: &IkeProposal) -> Option<AdditionalKes> {
    let mut out = [None; MAX_ADDITIONAL];
    for (i, slot) in ours.additional.iter().enumerate() {
        let theirs: Vec<Option<u16>> =
            p.transforms_of(addke_type(i)).map(|t| plain_id(t).map(|id| id.id())).collect();
        let method = |id: u16| if id == 0 { Some(None) } else { DhGroup::from_id(id).map(Some) };
        let chosen = if theirs.is_empty() {
            if !slot.is_empty() && !slot.contains(&None) {
                return None;
            }
            None
        } else if slot.is_empty() {
            // Our proposal leaves the slot out: only the peer's NONE fits.
            theirs.contains(&Some(0)).then_some(None)?
        } else {
            theirs.iter().flatten().filter_map(|id| method(*id)).find(|m| slot.contains(m))?
        };
        out[i] = chosen;
    }
    Some(out)
}

/// Whether one of `ours` holds every transform of `choice` (a connection that would have
/// accepted what was negotiated with another).
pub(crate) fn allows(ours: &[IkeProposal], choice: &IkeChoice) -> bool {
    ours.iter().any(|p| {
        p.ciphers.contains(&choice.suite.cipher)
            && choice.suite.integ.map_or(p.integs.is_empty(), |i| p.integs.contains(&i))
            && p.prfs.contains(&choice.prf)
            && p.groups.contains(&choice.group)
            && p.additional.iter().zip(&choice.additional).all(|(slot, c)| match c {
                Some(g) => slot.contains(&Some(*g)),
                None => slot.is_empty() || slot.contains(&None),
            })
    })
}

/// Chooses an IKE proposal from a received SA payload (responder, RFC 7296 §2.7).
///
/// Returns the peer's proposal number and the choice, or `None` (NO_PROPOSAL_CHOSEN).
/// `spi_len` is the SPI size the exchange requires (0 in IKE_SA_INIT, 8 in a rekey).
/// Additional key exchanges are chosen only where `additional` says the exchange can do
/// them (IKE_SA_INIT whose initiator announced IKE_INTERMEDIATE); elsewhere a proposal
/// that needs one is passed over.
pub fn select_ike(
    received: &Sa,
    ours: &[IkeProposal],
    spi_len: usize,
    additional: bool,
) -> Option<(u8, IkeChoice)> {
    for p in &received.proposals {
        if p.protocol != ProtocolId::IKE || p.spi.len() != spi_len || !types_known(p) {
            continue;
        }
        for o in ours {
            let suites: Vec<Suite> = o.suites().collect();
            let Some(suite) = pick_suite(p, &suites) else { continue };
            let Some(prf) = pick(p, TransformType::PRF, &o.prfs, Prf::from_id) else { continue };
            let Some(group) = pick(p, TransformType::KE, &o.groups, DhGroup::from_id) else { continue };
            let Some(more) = pick_additional(p, o) else { continue };
            if !additional && more.iter().any(Option::is_some) {
                continue;
            }
            return Some((p.number, IkeChoice { suite, prf, group, additional: more }));
        }
    }
    None
}

/// Chooses an ESP proposal from a received SA payload (responder). In IKE_AUTH
/// (`with_groups` false) KE transforms are ignored (RFC 7296 §1.2); in CREATE_CHILD_SA
/// the peer's group must be one of ours, or absent on both sides.
///
/// Returns the peer's proposal number, its SPI and the choice.
pub fn select_esp(received: &Sa, ours: &[EspProposal], with_groups: bool) -> Option<(u8, u32, EspChoice)> {
    for p in &received.proposals {
        if p.protocol != ProtocolId::ESP || !types_known(p) {
            continue;
        }
        let Some(spi) = p.child_spi() else { continue };
        for o in ours {
            let suites: Vec<Suite> = o.suites().collect();
            let Some(suite) = pick_suite(p, &suites) else { continue };
            let esn_ids: Vec<u16> = p.transforms_of(TransformType::ESN).map(|t| t.id.id()).collect();
            let esn = if esn_ids.is_empty() {
                o.esn.contains(&false).then_some(false)
            } else {
                let to_bool = |id: u16| match id {
                    0 => Some(false),
                    1 => Some(true),
                    _ => None,
                };
                pick(p, TransformType::ESN, &o.esn, to_bool)
            };
            let Some(esn) = esn else { continue };
            let group = if with_groups {
                let offered: Vec<u16> = p.transforms_of(TransformType::KE).map(|t| t.id.id()).collect();
                if offered.iter().all(|g| *g == 0) {
                    if !o.groups.is_empty() {
                        continue;
                    }
                    None
                } else {
                    match pick(p, TransformType::KE, &o.groups, DhGroup::from_id) {
                        Some(g) => Some(g),
                        None => continue,
                    }
                }
            } else {
                None
            };
            return Some((p.number, spi, EspChoice { suite, esn, group }));
        }
    }
    None
}

/// The one-proposal answer to an IKE proposal: the peer's number, the chosen transforms.
pub fn ike_answer(number: u8, choice: &IkeChoice) -> Sa {
    let mut transforms = vec![cipher_transform(choice.suite.cipher)];
    transforms.push(Transform::new(TransformId::Prf(w::PrfId(choice.prf.id()))));
    transforms.extend(choice.suite.integ.map(integ_transform));
    transforms.push(Transform::new(TransformId::Ke(w::DhGroup(choice.group.id()))));
    transforms.extend(
        choice.additional.iter().enumerate().filter_map(|(i, g)| g.map(|g| addke_transform(i, Some(g)))),
    );
    Sa { proposals: vec![Proposal { number, protocol: ProtocolId::IKE, transforms, ..Proposal::default() }] }
}

/// The one-proposal answer to an IKE rekey proposal, with our SPI of the new IKE SA.
pub fn ike_rekey_answer(number: u8, choice: &IkeChoice, spi: u64) -> Sa {
    let mut sa = ike_answer(number, choice);
    for p in &mut sa.proposals {
        p.spi = spi.to_be_bytes().to_vec();
    }
    sa
}

/// The one-proposal answer to an ESP proposal, with our inbound SPI.
pub fn esp_answer(number: u8, spi: u32, choice: &EspChoice) -> Sa {
    let mut transforms = vec![cipher_transform(choice.suite.cipher)];
    transforms.extend(choice.suite.integ.map(integ_transform));
    transforms.extend(choice.group.map(|g| Transform::new(TransformId::Ke(w::DhGroup(g.id())))));
    transforms.push(esn_transform(choice.esn));
    Sa {
        proposals: vec![Proposal {
            number,
            protocol: ProtocolId::ESP,
            spi: spi.to_be_bytes().to_vec(),
            transforms,
            ..Proposal::default()
        }],
    }
}

/// The proposal a response accepted, checked to be one we offered with exactly one
/// transform per type (§3.3.1); `None` if the answer is not acceptable.
fn answered<'a, T>(
    response: &'a Sa,
    offered: &'a [T],
    protocol: ProtocolId,
) -> Option<(&'a Proposal, &'a T)> {
    let [p] = response.proposals.as_slice() else { return None };
    if p.protocol != protocol || !types_known(p) {
        return None;
    }
    let ours = offered.get(usize::from(p.number).checked_sub(1)?)?;
    for ty in allowed_types(protocol) {
        if p.transforms_of(*ty).count() > 1 {
            return None;
        }
    }
    Some((p, ours))
}

/// Checks the responder's IKE SA payload against what we offered (initiator).
pub fn accept_ike_answer(response: &Sa, offered: &[IkeProposal]) -> Option<IkeChoice> {
    let (p, ours) = answered(response, offered, ProtocolId::IKE)?;
    if !p.spi.is_empty() {
        return None;
    }
    let suites: Vec<Suite> = ours.suites().collect();
    let suite = pick_suite(p, &suites)?;
    let prf = pick(p, TransformType::PRF, &ours.prfs, Prf::from_id)?;
    let group = pick(p, TransformType::KE, &ours.groups, DhGroup::from_id)?;
    let choice = IkeChoice { suite, prf, group, additional: answered_additional(p)? };
    // A responder that knows no additional key exchanges (RFC 9370 §2.2.1) may answer a
    // hybrid proposal without them: that is acceptable only where one of our proposals
    // allows the classical exchange alone.
    allows(offered, &choice).then_some(choice)
}

/// The additional key exchanges of a one-proposal answer: one transform per slot at most,
/// of a method we implement (NONE: not done).
fn answered_additional(p: &Proposal) -> Option<AdditionalKes> {
    let mut out = [None; MAX_ADDITIONAL];
    for (i, slot) in out.iter_mut().enumerate() {
        let mut ids = p.transforms_of(addke_type(i));
        let first = ids.next();
        if ids.next().is_some() {
            return None;
        }
        *slot = match first.map(|t| plain_id(t).map(|id| id.id())) {
            None | Some(Some(0)) => None,
            Some(Some(id)) => Some(DhGroup::from_id(id)?),
            Some(None) => return None,
        };
    }
    Some(out)
}

/// Checks the responder's answer to our IKE rekey (initiator): the choice and the
/// responder's SPI of the new IKE SA, which must not be zero.
pub fn accept_ike_rekey_answer(response: &Sa, offered: &[IkeProposal]) -> Option<(u64, IkeChoice)> {
    let (p, ours) = answered(response, offered, ProtocolId::IKE)?;
    let spi = p.ike_spi().filter(|s| *s != 0)?;
    let suites: Vec<Suite> = ours.suites().collect();
    let suite = pick_suite(p, &suites)?;
    let prf = pick(p, TransformType::PRF, &ours.prfs, Prf::from_id)?;
    let group = pick(p, TransformType::KE, &ours.groups, DhGroup::from_id)?;
    let choice = IkeChoice { suite, prf, group, additional: answered_additional(p)? };
    // As in IKE_SA_INIT: an answer without additional key exchanges only where one of our
    // proposals allows that.
    allows(offered, &choice).then_some((spi, choice))
}

/// Checks the responder's ESP SA payload against what we offered (initiator); returns
/// the responder's SPI and the choice.
pub fn accept_esp_answer(
    response: &Sa,
    offered: &[EspProposal],
    with_groups: bool,
) -> Option<(u32, EspChoice)> {
    let (p, ours) = answered(response, offered, ProtocolId::ESP)?;
    let spi = p.child_spi()?;
    let suites: Vec<Suite> = ours.suites().collect();
    let suite = pick_suite(p, &suites)?;
    let esn = match p.transforms_of(TransformType::ESN).next().map(|t| t.id.id()) {
        None | Some(0) => false,
        Some(1) => true,
        Some(_) => return None,
    };
    if !ours.esn.contains(&esn) {
        return None;
    }
    let group = match p.transforms_of(TransformType::KE).next().map(|t| t.id.id()) {
        None | Some(0) => None,
        Some(id) if with_groups => Some(DhGroup::from_id(id).filter(|g| ours.groups.contains(g))?),
        Some(_) => return None,
    };
    Some((spi, EspChoice { suite, esn, group }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ike(s: &str) -> IkeProposal {
        IkeProposal::parse(s).unwrap()
    }

    fn esp(s: &str) -> EspProposal {
        EspProposal::parse(s).unwrap()
    }

    #[test]
    fn the_four_interop_suites_parse() {
        assert_eq!(
            ike("aes256gcm16-prfsha256-ecp256"),
            IkeProposal {
                ciphers: vec![Cipher::AesGcm16_256],
                integs: vec![],
                prfs: vec![Prf::HmacSha256],
                groups: vec![DhGroup::EcpP256],
                additional: Default::default(),
            }
        );
        assert_eq!(
            ike("aes256-sha256-modp3072"),
            IkeProposal {
                ciphers: vec![Cipher::AesCbc256],
                integs: vec![Integ::HmacSha256_128],
                prfs: vec![Prf::HmacSha256],
                groups: vec![DhGroup::Modp3072],
                additional: Default::default(),
            }
        );
        assert_eq!(
            ike("chacha20poly1305-prfsha256-x25519"),
            IkeProposal {
                ciphers: vec![Cipher::ChaCha20Poly1305],
                integs: vec![],
                prfs: vec![Prf::HmacSha256],
                groups: vec![DhGroup::Curve25519],
                additional: Default::default(),
            }
        );
        assert_eq!(
            ike("aes128gcm16-prfsha384-ecp384"),
            IkeProposal {
                ciphers: vec![Cipher::AesGcm16_128],
                integs: vec![],
                prfs: vec![Prf::HmacSha384],
                groups: vec![DhGroup::EcpP384],
                additional: Default::default(),
            }
        );
    }

    #[test]
    fn esp_proposals_parse_with_and_without_esn_and_pfs() {
        assert_eq!(
            esp("aes128-sha256"),
            EspProposal {
                ciphers: vec![Cipher::AesCbc128],
                integs: vec![Integ::HmacSha256_128],
                groups: vec![],
                esn: vec![false]
            }
        );
        assert_eq!(esp("aes256gcm16-esn").esn, vec![true]);
        assert_eq!(esp("aes256gcm16-noesn").esn, vec![false]);
        assert_eq!(esp("aes256gcm16-esn-noesn").esn, vec![true, false]);
        assert_eq!(esp("aes256gcm16-ecp256").groups, vec![DhGroup::EcpP256]);
        assert_eq!(esp("chacha20poly1305").ciphers, vec![Cipher::ChaCha20Poly1305]);
        assert_eq!(esp("AES256GCM16").ciphers, vec![Cipher::AesGcm16_256], "keywords are case-insensitive");
    }

    #[test]
    fn alternatives_and_synonyms_accumulate_in_order() {
        let p = ike("aes128-aes256-sha256-sha2_384-sha256-modp3072-x25519-curve25519");
        assert_eq!(p.ciphers, vec![Cipher::AesCbc128, Cipher::AesCbc256]);
        assert_eq!(p.integs, vec![Integ::HmacSha256_128, Integ::HmacSha384_192]);
        assert_eq!(p.prfs, vec![Prf::HmacSha256, Prf::HmacSha384], "PRFs follow the integrity algorithms");
        assert_eq!(p.groups, vec![DhGroup::Modp3072, DhGroup::Curve25519]);
        assert_eq!(ike("aes256-sha512-prfsha384-ecp256").prfs, vec![Prf::HmacSha384], "explicit PRF wins");
    }

    #[test]
    fn lists_split_on_commas_and_expand_default() {
        let list =
            IkeProposal::parse_list(&["aes256gcm16-prfsha256-ecp256, aes256-sha256-modp3072"]).unwrap();
        assert_eq!(list.len(), 2);
        let default = IkeProposal::parse_list(&["default"]).unwrap();
        assert_eq!(default.len(), 2);
        assert!(EspProposal::parse_list(&["default", "aes128-sha256"]).unwrap().len() == 3);
    }

    #[test]
    fn bad_strings_get_clear_errors() {
        let unknown = |p: &str, t: &str| Error::UnknownAlgorithm { proposal: p.into(), token: t.into() };
        let unsupported =
            |p: &str, t: &str| Error::UnsupportedAlgorithm { proposal: p.into(), token: t.into() };
        for (input, expected) in [
            ("aes256gcm16-prfsha256-ecp999", unknown("aes256gcm16-prfsha256-ecp999", "ecp999")),
            ("rot13-sha256-modp3072", unknown("rot13-sha256-modp3072", "rot13")),
            ("aes256-sha256-modp3072-foo", unknown("aes256-sha256-modp3072-foo", "foo")),
            ("aes192-sha256-modp3072", unsupported("aes192-sha256-modp3072", "aes192")),
            ("aes256-sha1-modp3072", unsupported("aes256-sha1-modp3072", "sha1")),
            ("aes256-sha256-modp1024", unsupported("aes256-sha256-modp1024", "modp1024")),
            ("aes256gcm12-prfsha256-ecp256", unsupported("aes256gcm12-prfsha256-ecp256", "aes256gcm12")),
            ("aes128ccm16-prfsha256-ecp256", unsupported("aes128ccm16-prfsha256-ecp256", "aes128ccm16")),
            ("camellia256-sha256-ecp256", unsupported("camellia256-sha256-ecp256", "camellia256")),
            ("aes256-sha256-ecp521", unsupported("aes256-sha256-ecp521", "ecp521")),
            ("aes256-sha256-x448", unsupported("aes256-sha256-x448", "x448")),
            ("aes256-sha256-prfsha1-ecp256", unsupported("aes256-sha256-prfsha1-ecp256", "prfsha1")),
        ] {
            assert_eq!(IkeProposal::parse(input), Err(expected), "{input}");
        }
        let invalid = |p: &str| match IkeProposal::parse(p) {
            Err(Error::InvalidProposal { .. } | Error::IncompleteProposal { .. }) => {}
            other => panic!("{p}: {other:?}"),
        };
        invalid(""); // empty keyword
        invalid("aes256--sha256-modp3072");
        invalid("aes256gcm16-ecp256"); // AEAD without PRF
        invalid("aes256gcm16-sha256-prfsha256-ecp256"); // AEAD with integrity
        invalid("aes256gcm16-aes256-sha256-prfsha256-ecp256"); // mixed AEAD/non-AEAD
        invalid("aes256-prfsha256-ecp256"); // CBC without integrity
        invalid("aes256-sha256"); // IKE without DH
        invalid("sha256-prfsha256-ecp256"); // no cipher
        invalid("aes256gcm16-prfsha256-ecp256-esn"); // ESN in IKE
        assert!(matches!(EspProposal::parse("aes256gcm16-prfsha256"), Err(Error::InvalidProposal { .. })));
        assert!(matches!(EspProposal::parse("aes256"), Err(Error::IncompleteProposal { .. })));
        assert!(matches!(EspProposal::parse("aes256gcm16-sha256"), Err(Error::InvalidProposal { .. })));
        assert!(IkeProposal::parse_list(&[]).is_err());
        let message = IkeProposal::parse("aes256-sha256-ecp999").unwrap_err().to_string();
        assert!(message.contains("ecp999") && message.contains("unknown"), "{message}");
    }

    #[test]
    fn wire_proposals_carry_iana_ids_and_key_lengths() {
        let sa = ike_sa_payload(&[ike("aes256gcm16-prfsha256-ecp256"), ike("aes128-sha256-modp3072")]);
        assert_eq!(sa.proposals.len(), 2);
        let first = &sa.proposals[0];
        assert_eq!((first.number, first.protocol, first.spi.len()), (1, ProtocolId::IKE, 0));
        assert_eq!(
            first.transforms,
            vec![
                Transform::with_key_length(TransformId::Encr(w::EncrId::AES_GCM_16), 256),
                Transform::new(TransformId::Prf(w::PrfId::HMAC_SHA2_256)),
                Transform::new(TransformId::Ke(w::DhGroup::ECP_256)),
            ]
        );
        let second = &sa.proposals[1];
        assert_eq!(second.number, 2);
        assert_eq!(
            second.transforms[0],
            Transform::with_key_length(TransformId::Encr(w::EncrId::AES_CBC), 128)
        );
        assert!(second
            .transforms
            .contains(&Transform::new(TransformId::Integ(w::IntegId::HMAC_SHA2_256_128))));
        let chacha = ike("chacha20poly1305-prfsha256-x25519").to_wire(1);
        assert_eq!(chacha.transforms[0], Transform::new(TransformId::Encr(w::EncrId::CHACHA20_POLY1305)));
        let esp_sa = esp_sa_payload(&[esp("aes256gcm16-ecp256-esn")], 0xc0ff_ee01, false);
        let p = &esp_sa.proposals[0];
        assert_eq!(p.child_spi(), Some(0xc0ff_ee01));
        assert_eq!(p.transforms_of(TransformType::KE).count(), 0, "no KE in IKE_AUTH");
        assert_eq!(
            p.transforms_of(TransformType::ESN).next().map(|t| t.id),
            Some(TransformId::Esn(w::EsnId::ESN))
        );
        // Encodes as a valid SA payload.
        let msg = w::Message::new(
            w::IkeHeader::new(1, 0, w::ExchangeType::IKE_SA_INIT, w::HeaderFlags::INITIATOR, 0),
            [w::Payload::Sa(sa)],
        );
        assert!(msg.to_vec().is_ok());
    }

    #[test]
    fn selection_follows_the_initiators_order_against_our_list() {
        let offered = ike_sa_payload(&[
            ike("aes128-sha256-modp2048"),
            ike("aes256gcm16-prfsha256-ecp256"),
            ike("chacha20poly1305-prfsha256-x25519"),
        ]);
        // We prefer chacha, but the initiator's order decides among acceptable ones.
        let ours = [ike("chacha20poly1305-prfsha256-x25519"), ike("aes256gcm16-prfsha256-ecp256")];
        let (number, choice) = select_ike(&offered, &ours, 0, false).unwrap();
        assert_eq!(number, 2);
        assert_eq!(
            choice,
            IkeChoice::new(Suite::aead(Cipher::AesGcm16_256), Prf::HmacSha256, DhGroup::EcpP256)
        );
        // The answer echoes number 2 with one transform per type and is accepted back.
        let answer = ike_answer(number, &choice);
        let offered_list = [
            ike("aes128-sha256-modp2048"),
            ike("aes256gcm16-prfsha256-ecp256"),
            ike("chacha20poly1305-prfsha256-x25519"),
        ];
        assert_eq!(accept_ike_answer(&answer, &offered_list), Some(choice));
        // An answer naming a proposal we did not send, or a transform of another proposal, is refused.
        let mut wrong = answer.clone();
        wrong.proposals[0].number = 1;
        assert_eq!(accept_ike_answer(&wrong, &offered_list), None);
        let mut two = answer.clone();
        two.proposals[0].transforms.push(Transform::new(TransformId::Ke(w::DhGroup::CURVE25519)));
        assert_eq!(accept_ike_answer(&two, &offered_list), None);
    }

    #[test]
    fn within_a_proposal_the_peers_transform_order_wins() {
        let offered =
            ike_sa_payload(&[ike("aes128-aes256-sha384-sha256-prfsha384-prfsha256-ecp384-modp3072")]);
        let ours = [ike("aes256-aes128-sha256-sha384-prfsha256-prfsha384-modp3072-ecp384")];
        let (_, choice) = select_ike(&offered, &ours, 0, false).unwrap();
        assert_eq!(choice.suite, Suite::cbc(Cipher::AesCbc128, Integ::HmacSha384_192));
        assert_eq!(choice.prf, Prf::HmacSha384);
        assert_eq!(choice.group, DhGroup::EcpP384);
    }

    #[test]
    fn no_common_proposal_selects_nothing() {
        let offered = ike_sa_payload(&[ike("aes256-sha256-modp3072")]);
        assert_eq!(select_ike(&offered, &[ike("aes256gcm16-prfsha256-ecp256")], 0, false), None);
        assert_eq!(
            select_ike(&offered, &[ike("aes256-sha256-modp2048")], 0, false),
            None,
            "DH must match too"
        );
        assert_eq!(
            select_ike(&offered, &[ike("aes256-sha256-modp3072")], 8, false),
            None,
            "SPI size must match"
        );
        let esp_offered = esp_sa_payload(&[esp("aes256gcm16")], 0x1000, false);
        assert_eq!(select_esp(&esp_offered, &[esp("aes256gcm16-esn")], false), None, "ESN must match");
    }

    #[test]
    fn unknown_transform_types_or_attributes_make_a_proposal_unacceptable() {
        let mut offered =
            ike_sa_payload(&[ike("aes256gcm16-prfsha256-ecp256"), ike("aes256gcm16-prfsha256-ecp256")]);
        offered.proposals[0]
            .transforms
            .push(Transform::new(TransformId::Other { ty: TransformType(6), id: 36 }));
        let ours = [ike("aes256gcm16-prfsha256-ecp256")];
        assert_eq!(select_ike(&offered, &ours, 0, false).map(|(n, _)| n), Some(2));
        let mut odd = ike_sa_payload(&[ike("aes256gcm16-prfsha256-ecp256")]);
        odd.proposals[0].transforms[0]
            .attributes
            .push(w::TransformAttribute { ty: w::AttributeType(99), value: w::AttributeValue::Short(1) });
        assert_eq!(select_ike(&odd, &ours, 0, false), None);
        // AES without a key length (or with 192 bits) is not something we implement.
        let mut nolen = ike_sa_payload(&[ike("aes256gcm16-prfsha256-ecp256")]);
        nolen.proposals[0].transforms[0].attributes.clear();
        assert_eq!(select_ike(&nolen, &ours, 0, false), None);
    }

    #[test]
    fn esp_selection_ignores_ke_in_ike_auth_and_round_trips() {
        let ours = [esp("aes128gcm16-esn"), esp("aes256-sha256")];
        let offered_list = [esp("aes256-sha384-sha256-noesn"), esp("aes128gcm16-ecp256-esn-noesn")];
        let offered = esp_sa_payload(&offered_list, 0xc000_0001, true);
        let (number, spi, choice) = select_esp(&offered, &ours, false).unwrap();
        assert_eq!((number, spi), (1, 0xc000_0001));
        assert_eq!(
            choice,
            EspChoice {
                suite: Suite::cbc(Cipher::AesCbc256, Integ::HmacSha256_128),
                esn: false,
                group: None
            }
        );
        let answer = esp_answer(number, 0xd000_0002, &choice);
        assert_eq!(accept_esp_answer(&answer, &offered_list, false), Some((0xd000_0002, choice)));
        // The second proposal: group ignored in IKE_AUTH, ESN by the peer's order.
        let only_second = esp_sa_payload(&offered_list[1..], 0xc000_0001, true);
        let (_, _, choice) = select_esp(&only_second, &ours, false).unwrap();
        assert_eq!(choice, EspChoice { suite: Suite::aead(Cipher::AesGcm16_128), esn: true, group: None });
        // With groups (CREATE_CHILD_SA) our proposal without PFS does not accept it.
        assert_eq!(select_esp(&only_second, &ours, true), None);
        assert!(select_esp(&only_second, &[esp("aes128gcm16-ecp256-esn")], true).is_some());
    }

    #[test]
    fn additional_key_exchanges_parse_in_strongswan_6_syntax() {
        let p = ike("aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024-ke2_none");
        assert_eq!(p.groups, [DhGroup::Curve25519]);
        assert_eq!(p.additional[0], [Some(DhGroup::MlKem768)]);
        assert_eq!(p.additional[1], [Some(DhGroup::MlKem1024), None]);
        assert!(p.additional[2..].iter().all(Vec::is_empty));
        let wire = p.to_wire(1);
        let types: Vec<u8> = wire.transforms.iter().map(|t| t.id.ty().0).collect();
        assert_eq!(types, [1, 2, 4, 6, 7, 7]);
        let refused = |s: &str| IkeProposal::parse(s).unwrap_err().to_string();
        assert!(refused("aes256gcm16-prfsha256-mlkem768").contains("additional key exchange"));
        assert!(refused("aes256gcm16-prfsha256-x25519-ke1_none").contains("none"));
        assert!(matches!(
            IkeProposal::parse("aes256gcm16-prfsha256-x25519-ke1_mlkem512"),
            Err(Error::UnsupportedAlgorithm { .. })
        ));
        assert!(matches!(
            IkeProposal::parse("aes256gcm16-prfsha256-x25519-ke8_mlkem768"),
            Err(Error::UnknownAlgorithm { .. })
        ));
        assert!(matches!(
            EspProposal::parse("aes256gcm16-ke1_mlkem768"),
            Err(Error::UnsupportedAlgorithm { .. })
        ));
        assert!(matches!(
            EspProposal::parse("aes256gcm16-mlkem768"),
            Err(Error::UnsupportedAlgorithm { .. })
        ));
    }

    #[test]
    fn additional_key_exchanges_are_chosen_only_with_intermediate_and_where_both_allow() {
        let hybrid = ike("aes256gcm16-prfsha256-x25519-ke1_mlkem768-ke1_mlkem1024");
        let offered = ike_sa_payload(&[ike("aes256gcm16-prfsha256-x25519-ke1_mlkem1024-ke1_mlkem768")]);
        let (_, c) = select_ike(&offered, std::slice::from_ref(&hybrid), 0, true).unwrap();
        assert_eq!(c.additional_kes().collect::<Vec<_>>(), [DhGroup::MlKem1024], "the peer's order");
        assert_eq!(
            select_ike(&offered, std::slice::from_ref(&hybrid), 0, false),
            None,
            "no IKE_INTERMEDIATE"
        );
        assert_eq!(select_ike(&offered, &[ike("aes256gcm16-prfsha256-x25519")], 0, true), None);
        let optional = ike_sa_payload(&[ike("aes256gcm16-prfsha256-x25519-ke1_mlkem768-ke1_none")]);
        let (_, c) = select_ike(&optional, &[ike("aes256gcm16-prfsha256-x25519")], 0, false).unwrap();
        assert_eq!(c.additional_kes().count(), 0);
        // The answer carries the choice; an answer without it is taken only where one of
        // our proposals allows the classical exchange alone.
        let answer = ike_answer(1, &c);
        assert!(accept_ike_answer(&answer, std::slice::from_ref(&hybrid)).is_none(), "downgrade refused");
        let both = [hybrid.clone(), hybrid.without_additional()];
        assert_eq!(accept_ike_answer(&answer, &both), Some(c));
        let (_, h) = select_ike(&offered, &both, 0, true).unwrap();
        assert_eq!(accept_ike_answer(&ike_answer(1, &h), &both), Some(h));
    }
}

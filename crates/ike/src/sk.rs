//! Encrypted (SK) messages through the enclave (RFC 7296 §3.14): the engine lays out the
//! message and the enclave encrypts or verifies and decrypts it in place. A message larger
//! than the path takes leaves as RFC 7383 fragments (SKF), each laid out and protected the
//! same way; the peer's fragments are opened one by one and put together (`fragment.rs`).

use std::time::Instant;

use enclave::{Enclave, IkeSaHandle, Suite};
use wire::ike::{
    decode_chain, encode_chain, Encrypted, EncryptedFragment, IkeHeader, Message, Payload, PayloadEntry,
    PayloadType,
};

use crate::error::Result;
use crate::event::DropReason;
use crate::fragment::{Fragmentation, Piece, Taken, MAX_FRAGMENTS};

/// One IKE message as sent: one datagram, or its fragments in order.
pub(crate) type Datagrams = Vec<Vec<u8>>;

/// Encodes `inner` into an SK payload under `header` and has the enclave protect it; as
/// fragments where `fragment_at` (the largest message a datagram takes) is given and the
/// message is larger.
pub(crate) fn seal<E: Enclave>(
    enclave: &mut E,
    ike: IkeSaHandle,
    suite: Suite,
    header: IkeHeader,
    inner: Vec<Payload>,
    fragment_at: Option<usize>,
) -> Result<Datagrams> {
    let (bytes, ()) = seal_with(enclave, ike, suite, header, inner, fragment_at, |e, m, aad, pt| {
        e.sk_encrypt(ike, m, aad, pt)
    })?;
    Ok(bytes)
}

/// [`seal`], with the enclave's protection of the laid-out message (of its last fragment)
/// done by `protect` (`message`, `aad_len`, `plaintext_len` as [`Enclave::sk_encrypt`] takes
/// them), which may do more in the same call; hands back the datagrams and what `protect`
/// returned.
pub(crate) fn seal_with<E: Enclave, T>(
    enclave: &mut E,
    ike: IkeSaHandle,
    suite: Suite,
    header: IkeHeader,
    inner: Vec<Payload>,
    fragment_at: Option<usize>,
    protect: impl FnOnce(&mut E, &mut [u8], usize, usize) -> core::result::Result<T, enclave::Error>,
) -> Result<(Datagrams, T)> {
    let chain: Vec<PayloadEntry> = inner.into_iter().map(PayloadEntry::from).collect();
    let mut plaintext = Vec::new();
    let first_inner = encode_chain(&chain, &mut plaintext)?;
    let (mut bytes, aad_len) = lay_out(suite, header, first_inner, &plaintext)?;
    let max = match fragment_at {
        Some(max) if bytes.len() > max => max,
        _ => {
            let done = protect(enclave, &mut bytes, aad_len, plaintext.len())?;
            return Ok((vec![bytes], done));
        }
    };
    let chunk = fragment_chunk(suite, max);
    let chunks: Vec<&[u8]> = plaintext.chunks(chunk.max(1)).collect();
    let total = u16::try_from(chunks.len()).ok().filter(|&t| t <= MAX_FRAGMENTS).ok_or(
        wire::Error::BufferTooSmall { what: "IKE fragments (RFC 7383)", need: plaintext.len(), have: chunk },
    )?;
    let mut out = Vec::with_capacity(chunks.len());
    let mut protect = Some(protect);
    let mut done = None;
    for (number, piece) in (1..=total).zip(&chunks) {
        let first = if number == 1 { first_inner } else { PayloadType::NONE };
        let (mut bytes, aad_len) = lay_out_fragment(suite, header, first, number, total, piece)?;
        match protect.take() {
            Some(last) if number == total => done = Some(last(enclave, &mut bytes, aad_len, piece.len())?),
            keep => {
                protect = keep;
                enclave.sk_encrypt(ike, &mut bytes, aad_len, piece.len())?;
            }
        }
        out.push(bytes);
    }
    let done = done.ok_or(wire::Error::BufferTooSmall { what: "IKE fragments", need: 1, have: 0 })?;
    Ok((out, done))
}

/// The most plaintext one fragment of at most `max` bytes carries: the IKE header (28) and
/// SKF header (8) come first, the suite's IV, padding and ICV around it.
fn fragment_chunk(suite: Suite, max: usize) -> usize {
    let mut chunk = max.saturating_sub(28 + 8);
    // Padding rounds up by at most one block: a few steps down find the largest that fits.
    while chunk > 1 && 28 + 8 + suite.sk_layout(chunk).body_len(chunk) > max {
        chunk -= 1;
    }
    chunk
}

/// Fragment `number` of `total` with `plaintext` in its SKF payload under `header`, ready
/// for the enclave, and the length of its associated data (the IKE and SKF headers).
fn lay_out_fragment(
    suite: Suite,
    header: IkeHeader,
    first_inner: PayloadType,
    number: u16,
    total: u16,
    plaintext: &[u8],
) -> Result<(Vec<u8>, usize)> {
    let layout = suite.sk_layout(plaintext.len());
    let body_len = layout.body_len(plaintext.len());
    let skf = EncryptedFragment { first_inner, number, total, data: vec![0; body_len] };
    let mut bytes = Message::new(header, [Payload::EncryptedFragment(skf)]).to_vec()?;
    let aad_len = bytes.len().saturating_sub(body_len);
    place(&mut bytes, aad_len + layout.iv_len, plaintext, "SKF payload")?;
    Ok((bytes, aad_len))
}

fn place(bytes: &mut [u8], at: usize, plaintext: &[u8], what: &'static str) -> Result<()> {
    let have = bytes.len();
    let slot = bytes.get_mut(at..at + plaintext.len()).ok_or(wire::Error::BufferTooSmall {
        what,
        need: at + plaintext.len(),
        have,
    })?;
    slot.copy_from_slice(plaintext);
    Ok(())
}

/// Protects an already encoded inner chain (`plaintext`, starting with a payload of type
/// `first_inner`) in an SK payload under `header` (the fuzz harness's mutations).
#[cfg(fuzzing)]
pub(crate) fn seal_raw<E: Enclave>(
    enclave: &mut E,
    ike: IkeSaHandle,
    suite: Suite,
    header: IkeHeader,
    first_inner: wire::ike::PayloadType,
    plaintext: &[u8],
) -> Result<Vec<u8>> {
    let (mut bytes, aad_len) = lay_out(suite, header, first_inner, plaintext)?;
    enclave.sk_encrypt(ike, &mut bytes, aad_len, plaintext.len())?;
    Ok(bytes)
}

/// A fragment with an already encoded piece (`plaintext`) of an inner chain, protected like
/// any fragment we send (the fuzz harness's mutations of reassembly).
#[cfg(fuzzing)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn seal_raw_fragment<E: Enclave>(
    enclave: &mut E,
    ike: IkeSaHandle,
    suite: Suite,
    header: IkeHeader,
    first_inner: PayloadType,
    number: u16,
    total: u16,
    plaintext: &[u8],
) -> Result<Vec<u8>> {
    let (mut bytes, aad_len) = lay_out_fragment(suite, header, first_inner, number, total, plaintext)?;
    enclave.sk_encrypt(ike, &mut bytes, aad_len, plaintext.len())?;
    Ok(bytes)
}

/// The message with `plaintext` in its SK payload, ready for the enclave, and the length of
/// its associated data.
fn lay_out(
    suite: Suite,
    header: IkeHeader,
    first_inner: wire::ike::PayloadType,
    plaintext: &[u8],
) -> Result<(Vec<u8>, usize)> {
    let layout = suite.sk_layout(plaintext.len());
    let body_len = layout.body_len(plaintext.len());
    let message =
        Message::new(header, [Payload::Encrypted(Encrypted { first_inner, data: vec![0; body_len] })]);
    let mut bytes = message.to_vec()?;
    // The SK body is the tail of the message, so the associated data is everything before.
    let aad_len = bytes.len().saturating_sub(body_len);
    place(&mut bytes, aad_len + layout.iv_len, plaintext, "SK payload")?;
    Ok((bytes, aad_len))
}

/// Why an SK message could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// There is no SK or SKF payload at the end of the message.
    NoSk,
    /// The enclave refused it: integrity check or padding failed.
    Integrity,
    /// The plaintext is not a valid payload chain.
    Inner(wire::Error),
    /// An authentic fragment that reassembly did not take.
    Fragment(DropReason),
}

/// What a received message brought.
#[derive(Debug)]
pub(crate) enum Opened {
    /// The inner payloads: of an SK message, or of the last missing fragment's message;
    /// and their plaintext.
    Whole(Vec<Payload>, Plain),
    /// A fragment, kept until the rest arrive.
    Waiting,
}

/// The inner payloads of an SK message in plaintext, as encrypted (put together from
/// fragments where they came in pieces).
#[derive(Debug, Clone)]
pub(crate) struct Plain {
    /// The type of the first inner payload.
    pub(crate) first_inner: PayloadType,
    /// The payload chain.
    pub(crate) bytes: Vec<u8>,
}

impl Plain {
    /// The plaintext of inner payloads we send, as [`seal`] encodes them.
    pub(crate) fn of(inner: &[Payload]) -> Result<Self> {
        let chain: Vec<PayloadEntry> = inner.iter().cloned().map(PayloadEntry::from).collect();
        let mut bytes = Vec::new();
        let first_inner = encode_chain(&chain, &mut bytes)?;
        Ok(Self { first_inner, bytes })
    }

    /// The message under `header` in the form RFC 9242 §3.3.2 authenticates
    /// (`IntAuth_*A | IntAuth_*P`): the IKE header and the Encrypted payload's header,
    /// their lengths those of this form (no IV, padding or ICV; as if not fragmented),
    /// then the inner payloads.
    pub(crate) fn authenticated_form(&self, header: &IkeHeader) -> Vec<u8> {
        let total = IkeHeader::LEN + 4 + self.bytes.len();
        let mut m = Vec::with_capacity(total);
        m.extend_from_slice(&header.initiator_spi.to_be_bytes());
        m.extend_from_slice(&header.responder_spi.to_be_bytes());
        m.extend_from_slice(&[PayloadType::SK.0, header.version, header.exchange_type.0, header.flags.0]);
        m.extend_from_slice(&header.message_id.to_be_bytes());
        m.extend_from_slice(&u32::try_from(total).unwrap_or(u32::MAX).to_be_bytes());
        m.extend_from_slice(&[self.first_inner.0, 0]);
        m.extend_from_slice(&u16::try_from(total - IkeHeader::LEN).unwrap_or(u16::MAX).to_be_bytes());
        m.extend_from_slice(&self.bytes);
        m
    }
}

/// Verifies and decrypts the SK payload of a received message, or its SKF payload into
/// `fragments` (RFC 7383 §2.6); returns the inner payloads once there is a whole message.
pub(crate) fn open<E: Enclave>(
    enclave: &mut E,
    ike: IkeSaHandle,
    datagram: &[u8],
    message: &Message,
    fragments: &mut Fragmentation,
    now: Instant,
) -> core::result::Result<Opened, OpenError> {
    if let Some(sk) = message.encrypted() {
        let plaintext = decrypt(enclave, ike, datagram, sk.data.len())?;
        return inner_chain(sk.first_inner, plaintext);
    }
    let skf = message.encrypted_fragment().ok_or(OpenError::NoSk)?;
    let plaintext = decrypt(enclave, ike, datagram, skf.data.len())?;
    let h = message.header;
    let piece = Piece {
        id: h.message_id,
        response: h.flags.response(),
        number: skf.number,
        total: skf.total,
        first_inner: skf.first_inner,
        plaintext: &plaintext,
    };
    match fragments.take(now, piece) {
        Taken::Kept => Ok(Opened::Waiting),
        Taken::Complete { first_inner, plaintext } => inner_chain(first_inner, plaintext),
        Taken::Dropped(reason) => Err(OpenError::Fragment(reason)),
    }
}

/// The plaintext of the encrypted payload whose body is the last `body_len` bytes.
fn decrypt<E: Enclave>(
    enclave: &mut E,
    ike: IkeSaHandle,
    datagram: &[u8],
    body_len: usize,
) -> core::result::Result<Vec<u8>, OpenError> {
    let aad_len = datagram.len().checked_sub(body_len).ok_or(OpenError::NoSk)?;
    let mut buffer = datagram.to_vec();
    let range = enclave.sk_decrypt(ike, &mut buffer, aad_len).map_err(|_| OpenError::Integrity)?;
    buffer.get(range).map(<[u8]>::to_vec).ok_or(OpenError::Integrity)
}

fn inner_chain(first_inner: PayloadType, plaintext: Vec<u8>) -> core::result::Result<Opened, OpenError> {
    let chain = decode_chain(first_inner, &plaintext).map_err(OpenError::Inner)?;
    let payloads = chain.into_iter().map(|e| e.payload).collect();
    Ok(Opened::Whole(payloads, Plain { first_inner, bytes: plaintext }))
}

//! Encrypted (SK) messages through the enclave (RFC 7296 §3.14): the engine lays out the
//! message and the enclave encrypts or verifies and decrypts it in place.

use enclave::{Enclave, IkeSaHandle, Suite};
use wire::ike::{decode_chain, encode_chain, Encrypted, IkeHeader, Message, Payload, PayloadEntry};

use crate::error::Result;

/// Encodes `inner` into an SK payload under `header` and has the enclave protect it.
pub(crate) fn seal<E: Enclave>(
    enclave: &mut E,
    ike: IkeSaHandle,
    suite: Suite,
    header: IkeHeader,
    inner: Vec<Payload>,
) -> Result<Vec<u8>> {
    let (bytes, ()) =
        seal_with(enclave, suite, header, inner, |e, m, aad, pt| e.sk_encrypt(ike, m, aad, pt))?;
    Ok(bytes)
}

/// [`seal`], with the enclave's protection of the laid-out message done by `protect`
/// (`message`, `aad_len`, `plaintext_len` as [`Enclave::sk_encrypt`] takes them), which may
/// do more in the same call; hands back the message and what `protect` returned.
pub(crate) fn seal_with<E: Enclave, T>(
    enclave: &mut E,
    suite: Suite,
    header: IkeHeader,
    inner: Vec<Payload>,
    protect: impl FnOnce(&mut E, &mut [u8], usize, usize) -> core::result::Result<T, enclave::Error>,
) -> Result<(Vec<u8>, T)> {
    let chain: Vec<PayloadEntry> = inner.into_iter().map(PayloadEntry::from).collect();
    let mut plaintext = Vec::new();
    let first_inner = encode_chain(&chain, &mut plaintext)?;
    let (mut bytes, aad_len) = lay_out(suite, header, first_inner, &plaintext)?;
    let done = protect(enclave, &mut bytes, aad_len, plaintext.len())?;
    Ok((bytes, done))
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
    let at = aad_len + layout.iv_len;
    let slot = bytes.get_mut(at..at + plaintext.len()).ok_or(wire::Error::BufferTooSmall {
        what: "SK payload",
        need: at + plaintext.len(),
        have: aad_len + body_len,
    })?;
    slot.copy_from_slice(plaintext);
    Ok((bytes, aad_len))
}

/// Why an SK message could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// There is no SK payload at the end of the message.
    NoSk,
    /// The enclave refused it: integrity check or padding failed.
    Integrity,
    /// The plaintext is not a valid payload chain.
    Inner(wire::Error),
}

/// Verifies and decrypts the SK payload of a received message; returns the inner payloads.
pub(crate) fn open<E: Enclave>(
    enclave: &mut E,
    ike: IkeSaHandle,
    datagram: &[u8],
    message: &Message,
) -> core::result::Result<Vec<Payload>, OpenError> {
    let sk = message.encrypted().ok_or(OpenError::NoSk)?;
    let aad_len = datagram.len().checked_sub(sk.data.len()).ok_or(OpenError::NoSk)?;
    let mut buffer = datagram.to_vec();
    let range = enclave.sk_decrypt(ike, &mut buffer, aad_len).map_err(|_| OpenError::Integrity)?;
    let plaintext = buffer.get(range).ok_or(OpenError::Integrity)?;
    let chain = decode_chain(sk.first_inner, plaintext).map_err(OpenError::Inner)?;
    Ok(chain.into_iter().map(|e| e.payload).collect())
}

//! What [`crate::gso`] and [`crate::gro`] both read in IP and TCP headers: protocol numbers,
//! TCP flags, big-endian fields and the pseudo-header sum.

use wire::checksum;

pub(crate) const PROTO_TCP: u8 = 6;
pub(crate) const PROTO_UDP: u8 = 17;
pub(crate) const TCP_FIN: u8 = 0x01;
pub(crate) const TCP_SYN: u8 = 0x02;
pub(crate) const TCP_RST: u8 = 0x04;
pub(crate) const TCP_PSH: u8 = 0x08;
pub(crate) const TCP_ACK: u8 = 0x10;
pub(crate) const TCP_URG: u8 = 0x20;
pub(crate) const TCP_CWR: u8 = 0x80;

/// The big-endian 16-bit field at `at`, if `b` holds it.
pub(crate) fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// The folded sum of the pseudo-header of `packet` (RFC 9293 §3.1 / RFC 768 / RFC 8200
/// §8.1) for a transport `proto` of `l4_len` bytes.
pub(crate) fn pseudo_header_sum(packet: &[u8], v6: bool, proto: u8, l4_len: usize) -> Option<u16> {
    let addrs = if v6 { packet.get(8..40) } else { packet.get(12..20) }?;
    let [a, b, c, d] = u32::try_from(l4_len).ok()?.to_be_bytes();
    Some(checksum::combine(&[checksum::data(addrs), checksum::data(&[0, proto, a, b, c, d])]))
}

//! `cloister decode`: show what the wire codec makes of captured bytes.
//!
//! For operators debugging interop (and the demo): each file is an IKE message (UDP
//! payload), an ESP packet (from the SPI on) or a whole IPv4/IPv6 packet carrying either.
//! With `--check`, every IKE message must re-encode byte for byte.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use wire::ike::{Message, Payload};
use wire::{EspPacket, IpPair, IpProtocol, Ipv4Packet, Ipv6Packet, UdpEncapPayload, UdpPacket};

/// Arguments of `cloister decode`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Files holding one IKE message, ESP packet or IP packet each.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Fail unless every IKE message re-encodes byte-exactly.
    #[arg(long)]
    check: bool,
    /// Print only a count per kind instead of a line per file.
    #[arg(long)]
    summary: bool,
    /// Print the full decoded structure of IKE messages.
    #[arg(long, short)]
    verbose: bool,
}

/// Runs `cloister decode`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let mut counts = [0usize; 3];
    for path in &args.files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (kind, line) = describe(&bytes, &args).with_context(|| format!("{name}: cannot decode"))?;
        counts[kind as usize] += 1;
        if !args.summary {
            println!("   {name:<34} {line}");
        }
    }
    let [ike, esp, ip] = counts;
    let checked = if args.check { ", every IKE message re-encoded byte-exactly" } else { "" };
    println!("   decoded {ike} IKE messages, {esp} ESP packets, {ip} IP packets{checked}");
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    Ike = 0,
    Esp = 1,
    Ip = 2,
}

fn describe(bytes: &[u8], args: &Args) -> anyhow::Result<(Kind, String)> {
    // An IP packet is recognised by a valid header, an IKE message by decoding whole (its
    // Length field must match the file); anything else is treated as ESP, whose body is
    // opaque, so random ciphertext can never be mistaken for a message.
    if looks_like_ip(bytes) {
        return Ok((Kind::Ip, ip(bytes, args)?));
    }
    if Message::decode(bytes).is_ok() {
        return Ok((Kind::Ike, ike(bytes, args)?));
    }
    Ok((Kind::Esp, esp(bytes)?))
}

fn looks_like_ip(bytes: &[u8]) -> bool {
    match bytes.first().map(|b| b >> 4) {
        Some(4) => Ipv4Packet::new_checked(bytes).is_ok_and(|p| p.verify_checksum()),
        // A file holds one whole packet, so the payload length must account for every byte.
        Some(6) => {
            Ipv6Packet::new_checked(bytes).is_ok_and(|p| 40 + usize::from(p.payload_len()) == bytes.len())
        }
        _ => false,
    }
}

fn ike(bytes: &[u8], args: &Args) -> anyhow::Result<String> {
    let msg = Message::decode(bytes)?;
    let h = &msg.header;
    let names: Vec<String> = msg.chain.iter().map(|e| payload_name(&e.payload)).collect();
    let mut line = format!(
        "IKE {:?} {} #{} [ {} ] {} bytes",
        h.exchange_type,
        if h.flags.response() { "response" } else { "request" },
        h.message_id,
        names.join(" "),
        bytes.len()
    );
    if args.check {
        let mut out = Vec::with_capacity(bytes.len());
        msg.encode(&mut out)?;
        if out != bytes {
            bail!("re-encoding differs from the input ({} vs {} bytes)", out.len(), bytes.len());
        }
        line.push_str(", re-encodes byte-exact");
    }
    if args.verbose {
        line.push_str(&format!("\n{msg:#?}"));
    }
    Ok(line)
}

fn payload_name(p: &Payload) -> String {
    match p {
        Payload::Notify(n) => format!("N({:?})", n.ty),
        Payload::Encrypted(e) => format!("SK{{first inner {:?}, {} bytes}}", e.first_inner, e.data.len()),
        other => format!("{:?}", other.ty()),
    }
}

fn esp(bytes: &[u8]) -> anyhow::Result<String> {
    let p = EspPacket::new_checked(bytes)?;
    Ok(format!(
        "ESP SPI {:#010x} seq {} ({} bytes of IV+ciphertext+ICV, opaque until the enclave verifies it)",
        p.spi(),
        p.sequence_number(),
        p.payload().len()
    ))
}

fn ip(bytes: &[u8], args: &Args) -> anyhow::Result<String> {
    let (src, dst, proto, payload, pair): (IpAddr, IpAddr, IpProtocol, &[u8], IpPair) =
        match bytes.first().map(|b| b >> 4) {
            Some(4) => {
                let p = Ipv4Packet::new_checked(bytes)?;
                if !p.verify_checksum() {
                    bail!("IPv4 header checksum is wrong");
                }
                let (s, d) = (p.src_addr(), p.dst_addr());
                // new_checked verified header_len <= total_len <= bytes.len().
                let payload =
                    bytes.get(usize::from(p.header_len())..usize::from(p.total_len())).unwrap_or_default();
                (s.into(), d.into(), p.protocol(), payload, IpPair::V4 { src: s, dst: d })
            }
            _ => {
                let p = Ipv6Packet::new_checked(bytes)?;
                let (proto, off) = p.upper_layer()?;
                let (s, d) = (p.src_addr(), p.dst_addr());
                // `off` counts from the start of the packet, past any extension headers.
                let end = 40 + usize::from(p.payload_len());
                let payload = bytes.get(off..end).unwrap_or_default();
                (s.into(), d.into(), proto, payload, IpPair::V6 { src: s, dst: d })
            }
        };
    if proto != IpProtocol::UDP {
        return Ok(format!("IP {src} -> {dst} {proto:?}, {} bytes", bytes.len()));
    }
    let udp = UdpPacket::new_checked(payload)?;
    if !udp.verify_checksum(&pair) {
        bail!("UDP checksum is wrong");
    }
    let inner = match (udp.dst_port(), udp.src_port()) {
        (4500, _) | (_, 4500) => match UdpEncapPayload::classify(udp.payload())? {
            UdpEncapPayload::Keepalive => "NAT keepalive".to_owned(),
            UdpEncapPayload::Ike(m) => ike(m, args)?,
            UdpEncapPayload::Esp(e) => esp(e)?,
        },
        _ => ike(udp.payload(), args)?,
    };
    Ok(format!("IP {src}:{} -> {dst}:{} UDP (checksum ok) | {inner}", udp.src_port(), udp.dst_port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_files_are_classified_by_what_decodes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/tests/vectors");
        let args = Args { files: Vec::new(), check: true, summary: true, verbose: false };
        let mut counts = [0usize; 3];
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".bin") {
                continue;
            }
            let bytes = std::fs::read(entry.path()).unwrap();
            let (kind, _) = describe(&bytes, &args).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let want = if name.starts_with("ike-") {
                Kind::Ike
            } else if name.starts_with("esp-") {
                Kind::Esp
            } else {
                Kind::Ip
            };
            assert_eq!(kind as usize, want as usize, "{name}");
            counts[kind as usize] += 1;
        }
        assert_eq!(counts, [36, 28, 12]);
    }

    #[test]
    fn esp_whose_bytes_look_like_ipv6_or_ike_stays_esp() {
        // SPI starting with nibble 6 and a small sequence number: an IPv6 header with
        // payload length 0 would "fit"; byte 17 = 0x20 resembles an IKE version octet.
        let mut esp = vec![0x60, 0x11, 0x22, 0x33, 0, 0, 0, 1];
        esp.extend_from_slice(&[0x20; 40]);
        let args = Args { files: Vec::new(), check: false, summary: true, verbose: false };
        assert!(matches!(describe(&esp, &args), Ok((Kind::Esp, _))));
    }
}

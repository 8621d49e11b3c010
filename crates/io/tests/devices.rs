//! The I/O layer against the real kernel, inside namespaces of its own (needs root): TUN
//! offloads are probed and printed, a UDP GSO send routed into the TUN device comes out as
//! one USO super-packet that `gso` cuts back into checksummed datagrams, the netdev ioctls
//! set MTU, addresses and routes, and raw ESP sockets normalise both families.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use cloister_io::gso::Segments;
use cloister_io::netdev;
use cloister_io::raw_esp::RawEspSocket;
use cloister_io::tun::{Tun, MAX_READ};
use cloister_io::udp::UdpSocket;
use cloister_io::vnet::{self, VnetHeader, VNET_HDR_LEN};
use cloister_io::{netns, poll, Outgoing, RecvBuffers};
use testnet::Netns;

fn skip() -> bool {
    if testnet::can_create_namespaces() {
        false
    } else {
        testnet::skip("needs root to create network namespaces");
        true
    }
}

/// Runs `f` in a thread that entered `ns` (the test's own thread keeps its namespace).
fn inside<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let name = ns.name().to_owned();
    std::thread::spawn(move || {
        netns::enter_named(&name).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// An independent UDP checksum check over an IPv4 packet (sum with pseudo-header = 0xffff).
fn udp4_checksum_ok(p: &[u8]) -> bool {
    let ihl = usize::from(p[0] & 0xf) * 4;
    let udp = &p[ihl..];
    let mut words: Vec<u8> = p[12..20].to_vec();
    words.extend_from_slice(&[0, 17]);
    words.extend_from_slice(&u16::try_from(udp.len()).unwrap().to_be_bytes());
    words.extend_from_slice(udp);
    if words.len() % 2 == 1 {
        words.push(0);
    }
    let mut sum: u32 = 0;
    for w in words.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// Every address given is on the device: two of each family, one given twice (a no-op), as
/// `ip` (an independent reader, over its own netlink socket) lists them.
#[test]
fn addresses_are_added_beside_each_other() {
    if skip() {
        return;
    }
    let ns = Netns::new("ioaddr").unwrap();
    let (listed, missing) = inside(&ns, || {
        let tun = Tun::open("cltun0", 1, false).unwrap();
        let name = tun.name().to_owned();
        netdev::set_up(&name).unwrap();
        for a in
            ["198.18.99.1/32", "198.18.97.1/24", "198.18.99.1/32", "2001:db8:99::1/128", "2001:db8:97::1/64"]
        {
            netdev::add_address(&name, a.parse().unwrap()).unwrap();
        }
        let missing =
            netdev::add_address("cltun9", "198.18.99.2/32".parse().unwrap()).unwrap_err().to_string();
        let out =
            std::process::Command::new("ip").args(["-o", "address", "show", "dev", &name]).output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), missing)
    });
    for a in ["198.18.99.1/32", "198.18.97.1/24", "2001:db8:99::1/128", "2001:db8:97::1/64"] {
        assert_eq!(listed.matches(&format!(" {a} ")).count(), 1, "{a} once in:\n{listed}");
    }
    assert!(missing.contains("cltun9"), "{missing}");
}

#[test]
fn a_udp_gso_burst_leaves_the_tun_device_as_one_super_packet_and_is_cut_back() {
    if skip() {
        return;
    }
    let ns = Netns::new("iotun").unwrap();
    let (offloads, super_seen) = inside(&ns, || {
        let tun = Tun::open("cltun0", 2, true).unwrap();
        let name = tun.name().to_owned();
        netdev::set_mtu(&name, 1400).unwrap();
        netdev::set_up(&name).unwrap();
        netdev::add_address(&name, "198.18.99.1/32".parse().unwrap()).unwrap();
        netdev::add_address(&name, "2001:db8:99::1/128".parse().unwrap()).unwrap();
        netdev::add_route(&name, "198.18.98.0/24".parse().unwrap()).unwrap();
        // Ten equal datagrams in one GSO send, routed into the TUN device.
        let sock = UdpSocket::bind("198.18.99.1:0".parse().unwrap(), false, true).unwrap();
        let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 1000]).collect();
        let dst: SocketAddr = "198.18.98.7:9".parse().unwrap();
        let r = sock.send(payloads.iter().map(|p| Outgoing { dst, tos: 0, bytes: p }));
        assert_eq!(r.sent, 10, "{r:?}");
        let mut buf = vec![0u8; MAX_READ];
        let mut datagrams: Vec<Vec<u8>> = Vec::new();
        let mut super_seen = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        while datagrams.len() < 10 && Instant::now() < deadline {
            let fds: Vec<_> = tun.queues().iter().map(AsFd::as_fd).collect();
            let _ = poll::wait_readable(&fds, Duration::from_millis(50));
            for q in tun.queues() {
                while let Some(n) = q.read(&mut buf).unwrap() {
                    let h = VnetHeader::parse(&buf[..n]).unwrap();
                    let packet = &buf[VNET_HDR_LEN..n];
                    // Only our UDP flow (the kernel also sends IPv6 MLD/RS into the device).
                    if packet[0] >> 4 != 4 || packet[9] != 17 {
                        continue;
                    }
                    super_seen |= h.gso_kind() == vnet::GSO_UDP_L4;
                    let s = Segments::new(&h, packet).unwrap();
                    for i in 0..s.count() {
                        let mut out = vec![0u8; 2048];
                        let len = s.write(i, &mut out).unwrap();
                        out.truncate(len);
                        datagrams.push(out);
                    }
                }
            }
        }
        assert_eq!(datagrams.len(), 10);
        for (i, d) in datagrams.iter().enumerate() {
            assert!(udp4_checksum_ok(d), "datagram {i}: UDP checksum");
            assert_eq!(&d[28..], &payloads[i][..], "datagram {i}: payload in order");
            assert_eq!(usize::from(u16::from_be_bytes([d[2], d[3]])), d.len(), "IPv4 total length");
        }
        // Read what iproute2 sees while the device exists (it goes with its last queue).
        let show = |args: &[&str]| {
            let mut argv = vec!["ip"];
            argv.extend_from_slice(args);
            testnet::run(&argv, Duration::from_secs(5)).unwrap().stdout
        };
        let addrs = show(&["addr", "show", "cltun0"]);
        assert!(addrs.contains("198.18.99.1/32") && addrs.contains("2001:db8:99::1/128"), "{addrs}");
        assert!(addrs.contains("mtu 1400"), "{addrs}");
        (tun.offloads(), super_seen)
    });
    eprintln!("TUN offloads accepted by this kernel: {offloads}");
    if offloads.uso4 {
        assert!(super_seen, "USO accepted, so the burst should arrive as one super-packet");
    }
}

#[test]
fn routes_through_a_tun_device_are_installed() {
    if skip() {
        return;
    }
    let ns = Netns::new("ioroute").unwrap();
    let routes = inside(&ns, || {
        let tun = Tun::open("cltun0", 1, false).unwrap();
        assert_eq!(tun.offloads().to_string(), "none", "offload = false asks for none");
        netdev::set_up(tun.name()).unwrap();
        netdev::add_route(tun.name(), "198.18.98.0/24".parse().unwrap()).unwrap();
        netdev::add_route(tun.name(), "2001:db8:98::/48".parse().unwrap()).unwrap();
        // `ip` run from this thread inherits its namespace.
        let v4 = testnet::run(&["ip", "route"], Duration::from_secs(5)).unwrap().stdout;
        let v6 = testnet::run(&["ip", "-6", "route"], Duration::from_secs(5)).unwrap().stdout;
        format!("{v4}{v6}")
    });
    assert!(routes.contains("198.18.98.0/24 dev cltun0"), "{routes}");
    assert!(routes.contains("2001:db8:98::/48 dev cltun0"), "{routes}");
}

/// An IPv4 packet carrying `payload` as ESP, ECT(0), checksum included.
fn ipv4_esp(src: [u8; 4], dst: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let total = u16::try_from(20 + payload.len()).unwrap();
    let mut p = vec![0x45, 0x02];
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, 50, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    let c = !wire::checksum::data(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// An IPv6 packet carrying `payload` as ESP, ECT(0).
fn ipv6_esp(src: [u8; 16], dst: [u8; 16], payload: &[u8]) -> Vec<u8> {
    // Version 6, traffic class 0x02 split over the first two bytes.
    let mut p = vec![0x60, 0x20, 0, 0];
    p.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    p.extend_from_slice(&[50, 64]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(payload);
    p
}

#[test]
fn raw_esp_sockets_hand_over_the_esp_packet_and_both_addresses() {
    if skip() {
        return;
    }
    let ns = Netns::new("ioraw").unwrap();
    ns.add_addr("lo", "198.18.97.1/32").unwrap();
    ns.add_addr("lo", "2001:db8:97::1/128").unwrap();
    inside(&ns, || {
        for v6 in [false, true] {
            let sock = RawEspSocket::open(v6).unwrap();
            let esp: Vec<u8> = (0..40u8).collect();
            let (addr, packet): (IpAddr, Vec<u8>) = if v6 {
                let a: std::net::Ipv6Addr = "2001:db8:97::1".parse().unwrap();
                (a.into(), ipv6_esp(a.octets(), a.octets(), &esp))
            } else {
                let a: std::net::Ipv4Addr = "198.18.97.1".parse().unwrap();
                (a.into(), ipv4_esp(a.octets(), a.octets(), &esp))
            };
            let r = sock.send([Outgoing { dst: SocketAddr::new(addr, 0), tos: 0, bytes: &packet }]);
            assert_eq!(r.sent, 1, "v6 {v6}: {r:?}");
            let mut bufs = RecvBuffers::new(4, 2048);
            let deadline = Instant::now() + Duration::from_secs(5);
            while bufs.messages() == 0 && Instant::now() < deadline {
                let _ = poll::wait_readable(&[sock.as_fd()], Duration::from_millis(50));
                sock.recv(&mut bufs).unwrap();
            }
            let d = bufs.datagrams().next().expect("the packet came back");
            assert_eq!(d.bytes, &esp[..], "v6 {v6}: only the ESP packet");
            assert_eq!(d.remote.ip(), addr, "v6 {v6}");
            assert_eq!(d.local, Some(addr), "v6 {v6}");
            assert_eq!(d.tos & 3, 2, "v6 {v6}: ECN bits reported");
        }
    });
}

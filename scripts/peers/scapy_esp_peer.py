#!/usr/bin/env python3
"""A live ESP peer made of scapy's IPsec module (independent of Cloister), for interop tests.

It runs inside a test's network namespace as the tenant's site gateway. For each of COUNT
pings it builds an inner ICMP echo request (site host -> cloud host), encrypts it with
scapy's SecurityAssociation and sends it to Cloister (raw ESP, or ESP-in-UDP), then waits
for Cloister's ESP answer, decrypts it with scapy and checks that it is the matching echo
reply with the same payload. So both directions are checked at run time: Cloister decrypted
what scapy encrypted (the cloud host answered the exact request), and scapy decrypted what
Cloister encrypted.

Usage: scapy_esp_peer.py JSON | @FILE  where JSON (or FILE's contents) is one case or a list
of cases (run one after the other in this process, so scapy is imported once), each holding
  name                          a label for the report (optional)
  suite        "aes128gcm16" | "aes256gcm16" | "chacha20poly1305" | "aes256-sha256" | "aes128-sha512"
  out_spi, out_enc, out_integ   the SA scapy encrypts with (Cloister's inbound), keys in hex
  in_spi, in_enc, in_integ      the SA scapy decrypts with (Cloister's outbound)
  local, remote                 outer addresses (scapy's, Cloister's)
  udp                           null, or [scapy's port, Cloister's port] for ESP-in-UDP
  esn                           bool
  site_host, cloud_host         inner addresses
  count, timeout                pings, seconds per answer
Prints one JSON line per case: {"name": .., "sent": n, "ok": n, "errors": [...]}; exit
status 0 iff every case got ok == count.
ESP that is not the case's (another SPI, another source: a raw ESP socket sees every ESP
packet of its namespace) is skipped, not counted as an error.
Addresses must be from 198.18.0.0/15 or 2001:db8::/32 (the caller's namespaces).
"""
import ipaddress
import json
import select
import socket
import struct
import sys
import time

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.packet import Raw

SUITES = {
    "aes128gcm16": ("AES-GCM", "NULL"),
    "aes256gcm16": ("AES-GCM", "NULL"),
    "chacha20poly1305": ("CHACHA20-POLY1305", "NULL"),
    "aes256-sha256": ("AES-CBC", "SHA2-256-128"),
    "aes128-sha512": ("AES-CBC", "SHA2-512-256"),
}
TEST_NETS = [ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:db8::/32")]
# Bounds whatever the input says: per answer, and pings per case.
MAX_TIMEOUT = 10.0
MAX_COUNT = 100


def check_addr(a):
    ip = ipaddress.ip_address(a)
    if not any(ip in n for n in TEST_NETS):
        raise SystemExit(f"refusing address outside the test ranges: {a}")
    return ip


def run_case(c):
    for a in (c["local"], c["remote"], c["site_host"], c["cloud_host"]):
        check_addr(a)
    v6 = check_addr(c["local"]).version == 6
    inner_v6 = check_addr(c["site_host"]).version == 6
    count = min(int(c["count"]), MAX_COUNT)
    timeout = min(float(c["timeout"]), MAX_TIMEOUT)
    crypt, auth = SUITES[c["suite"]]
    tunnel = IPv6(src=c["local"], dst=c["remote"]) if v6 else IP(src=c["local"], dst=c["remote"])
    udp = c.get("udp")
    nat_t = UDP(sport=udp[0], dport=udp[1]) if udp else None

    def sa(spi, enc, integ, hdr, nat):
        return SecurityAssociation(
            ESP, spi=spi, crypt_algo=crypt, crypt_key=bytes.fromhex(enc),
            auth_algo=auth, auth_key=bytes.fromhex(integ) if integ else None,
            tunnel_header=hdr, nat_t_header=nat, esn_en=c["esn"], esn=0,
        )

    out_sa = sa(c["out_spi"], c["out_enc"], c.get("out_integ"), tunnel, nat_t)
    back = IPv6(src=c["remote"], dst=c["local"]) if v6 else IP(src=c["remote"], dst=c["local"])
    in_sa = sa(c["in_spi"], c["in_enc"], c.get("in_integ"), back, None)
    remote = ipaddress.ip_address(c["remote"])

    family = socket.AF_INET6 if v6 else socket.AF_INET
    if udp:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind((c["local"], udp[0]))
    else:
        sock = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_ESP)

    sent, ok, errors = 0, 0, []
    deadline_total = time.monotonic() + count * timeout + 5
    try:
        for k in range(count):
            if time.monotonic() > deadline_total:
                errors.append("overall time limit")
                break
            payload = bytes((k * 7 + j) & 0xFF for j in range(56))
            if inner_v6:
                inner = IPv6(src=c["site_host"], dst=c["cloud_host"], hlim=64) / ICMPv6EchoRequest(
                    id=0x77, seq=k) / Raw(payload)
            else:
                inner = IP(src=c["site_host"], dst=c["cloud_host"], ttl=64) / ICMP(
                    id=0x77, seq=k) / Raw(payload)
            enc = out_sa.encrypt(inner, seq_num=k + 1)
            # What goes on the wire after the outer IP header (and UDP header).
            if udp:
                sock.sendto(bytes(enc[ESP]), (c["remote"], udp[1]))
            else:
                sock.sendto(bytes(enc[ESP]), (c["remote"], 0))
            sent += 1
            got = False
            end = time.monotonic() + timeout
            while time.monotonic() < end and not got:
                r, _, _ = select.select([sock], [], [], max(0.0, end - time.monotonic()))
                if not r:
                    break
                data, src = sock.recvfrom(65535)
                if not udp and not v6:
                    data = data[(data[0] & 0x0F) * 4:]  # raw IPv4 sockets include the IP header
                if udp and data == b"\xff":
                    continue  # NAT-keepalive
                if udp and data[:4] == b"\0\0\0\0":
                    continue  # an IKE message (non-ESP marker)
                if ipaddress.ip_address(src[0]) != remote or len(data) < 8:
                    continue
                if struct.unpack("!L", data[:4])[0] != c["in_spi"]:
                    continue  # another SA's packet
                try:
                    pkt = back / (UDP(sport=udp[1], dport=udp[0]) / ESP(data) if udp else ESP(data))
                    pkt = (IPv6 if v6 else IP)(bytes(pkt))
                    dec = in_sa.decrypt(pkt)
                except Exception as e:  # an undecryptable answer is a failure, reported
                    errors.append(f"ping {k}: decrypt: {type(e).__name__}: {e}")
                    continue
                if inner_v6:
                    rep = dec.getlayer(ICMPv6EchoReply)
                    good = rep is not None and rep.id == 0x77 and rep.seq == k and bytes(rep.data) == payload \
                        and rep.underlayer.src == c["cloud_host"] and rep.underlayer.dst == c["site_host"]
                else:
                    rep = dec.getlayer(ICMP)
                    good = rep is not None and rep.type == 0 and rep.id == 0x77 and rep.seq == k and \
                        bytes(rep.payload) == payload and rep.underlayer.src == c["cloud_host"] and \
                        rep.underlayer.dst == c["site_host"]
                if good:
                    got = True
                    ok += 1
                else:
                    errors.append(f"ping {k}: unexpected inner packet {dec.summary()}")
            if not got:
                errors.append(f"ping {k}: no valid answer within {timeout} s")
    finally:
        sock.close()
    return {"name": c.get("name", ""), "sent": sent, "ok": ok, "errors": errors[:20]}, ok == count


def main():
    if sys.argv[1].startswith("@"):
        with open(sys.argv[1][1:], encoding="utf-8") as f:
            arg = json.load(f)
    else:
        arg = json.loads(sys.argv[1])
    cases = arg if isinstance(arg, list) else [arg]
    all_ok = True
    for c in cases:
        report, good = run_case(c)
        print(json.dumps(report), flush=True)
        all_ok = all_ok and good
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()

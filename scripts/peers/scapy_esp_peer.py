#!/usr/bin/env python3
"""A live ESP peer made of scapy's IPsec module (independent of Cloister), for interop tests.

It runs inside a test's network namespace as the tenant's site gateway. For each of COUNT
pings it builds an inner ICMP echo request (site host -> cloud host), encrypts it with
scapy's SecurityAssociation and sends it to Cloister (raw ESP, or ESP-in-UDP), then waits
for Cloister's ESP answer, decrypts it with scapy and checks that it is the matching echo
reply with the same payload. So both directions are checked at run time: Cloister decrypted
what scapy encrypted (the cloud host answered the exact request), and scapy decrypted what
Cloister encrypted.

Usage: scapy_esp_peer.py JSON  where JSON holds
  suite        "aes128gcm16" | "aes256gcm16" | "chacha20poly1305" | "aes256-sha256" | "aes128-sha512"
  out_spi, out_enc, out_integ   the SA scapy encrypts with (Cloister's inbound), keys in hex
  in_spi, in_enc, in_integ      the SA scapy decrypts with (Cloister's outbound)
  local, remote                 outer addresses (scapy's, Cloister's)
  udp                           null, or [scapy's port, Cloister's port] for ESP-in-UDP
  esn                           bool
  site_host, cloud_host         inner addresses
  count, timeout                pings, seconds per answer
Prints one JSON line: {"sent": n, "ok": n, "errors": [...]}; exit status 0 iff ok == count.
Addresses must be from 198.18.0.0/15 or 2001:db8::/32 (the caller's namespaces).
"""
import ipaddress
import json
import select
import socket
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


def check_addr(a):
    ip = ipaddress.ip_address(a)
    if not any(ip in n for n in TEST_NETS):
        raise SystemExit(f"refusing address outside the test ranges: {a}")
    return ip


def main():
    c = json.loads(sys.argv[1])
    for a in (c["local"], c["remote"], c["site_host"], c["cloud_host"]):
        check_addr(a)
    v6 = check_addr(c["local"]).version == 6
    inner_v6 = check_addr(c["site_host"]).version == 6
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

    family = socket.AF_INET6 if v6 else socket.AF_INET
    if udp:
        rx = socket.socket(family, socket.SOCK_DGRAM)
        rx.bind((c["local"], udp[0]))
        tx = rx
    else:
        rx = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_ESP)
        tx = rx

    sent, ok, errors = 0, 0, []
    deadline_total = time.monotonic() + c["count"] * c["timeout"] + 5
    for k in range(c["count"]):
        if time.monotonic() > deadline_total:
            errors.append("overall time limit")
            break
        payload = bytes((k * 7 + j) & 0xFF for j in range(56))
        if inner_v6:
            inner = IPv6(src=c["site_host"], dst=c["cloud_host"], hlim=64) / ICMPv6EchoRequest(
                id=0x77, seq=k) / Raw(payload)
        else:
            inner = IP(src=c["site_host"], dst=c["cloud_host"], ttl=64) / ICMP(id=0x77, seq=k) / Raw(payload)
        enc = out_sa.encrypt(inner, seq_num=k + 1)
        # What goes on the wire after the outer IP header (and UDP header).
        body = bytes(enc[ESP]) if not udp else bytes(enc[UDP].payload)
        if udp:
            tx.sendto(body, (c["remote"], udp[1]))
        else:
            tx.sendto(body, (c["remote"], 0))
        sent += 1
        got = False
        end = time.monotonic() + c["timeout"]
        while time.monotonic() < end and not got:
            r, _, _ = select.select([rx], [], [], max(0.0, end - time.monotonic()))
            if not r:
                break
            data, _src = rx.recvfrom(65535)
            if not udp and not v6:
                data = data[(data[0] & 0x0F) * 4:]  # raw IPv4 sockets include the IP header
            if udp and data == b"\xff":
                continue  # NAT-keepalive
            try:
                pkt = back / (UDP(sport=udp[1], dport=udp[0]) / ESP(data) if udp else ESP(data))
                pkt = (IPv6 if v6 else IP)(bytes(pkt))
                dec = in_sa.decrypt(pkt)
            except Exception as e:  # an undecryptable answer is a failure, reported
                errors.append(f"ping {k}: decrypt: {type(e).__name__}: {e}")
                continue
            if inner_v6:
                rep = dec.getlayer(ICMPv6EchoReply)
                good = rep is not None and rep.id == 0x77 and rep.seq == k and bytes(rep.data) == payload
            else:
                rep = dec.getlayer(ICMP)
                good = rep is not None and rep.type == 0 and rep.id == 0x77 and rep.seq == k and \
                    bytes(rep.payload) == payload
            if good:
                got = True
                ok += 1
            else:
                errors.append(f"ping {k}: unexpected inner packet {dec.summary()}")
        if not got:
            errors.append(f"ping {k}: no valid answer within {c['timeout']} s")
    print(json.dumps({"sent": sent, "ok": ok, "errors": errors[:20]}))
    sys.exit(0 if ok == c["count"] else 1)


if __name__ == "__main__":
    main()

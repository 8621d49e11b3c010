#!/usr/bin/env python3
"""A hostile ESP peer made of scapy's IPsec module (independent of Cloister), for the
injector test (crates/cloister/tests/esp_injector.rs).

It runs inside the test's site namespace as the tenant's gateway, with the keys of static SAs
Cloister also has. For each SA it sends valid ESP (inner ICMP echo requests to the cloud
host, each answer decrypted and checked) and, mixed in with them, packets Cloister must drop:

  replay        an exact copy of a valid packet Cloister already accepted
  old           an authentic packet (right keys) whose sequence number was never sent but
                lies left of the anti-replay window (after a jump of the window)
  empty         no ESP at all: an empty UDP payload, or an IP header with protocol 50 alone
  short_header  truncated below the ESP header (8 bytes): 1..7 bytes of ESP
  short_body    at least the header, but shorter than header + IV + trailer + ICV
  misaligned    CBC only: a valid packet less 1 byte (ciphertext not whole blocks)
  cut_tail      a valid packet less some bytes, still of a possible shape (GCM: 1 and 4 bytes,
                CBC: one block): only the ICV can tell
  flip_iv, flip_ct, flip_icv   one bit flipped in the IV, the ciphertext or the ICV
  wrong_spi     a valid packet under an SPI Cloister has no inbound SA for (an unknown one,
                and Cloister's own outbound SPI)
  wrong_encap   a valid packet sent raw for an ESP-in-UDP SA, or in UDP for a raw-ESP SA

Where Cloister reads the SA's packets in order (ESP-in-UDP: one flow, one socket, one
worker), every tampered copy of a packet goes out before the valid packet with the same
sequence number: a tampered packet must not move the window (RFC 4303 §3.4.3: update only
after the integrity check), so the valid one must still be accepted afterwards. Elsewhere
(raw ESP, one socket read by every worker) the tampered copies are of spare sequence numbers
never sent valid, so that the counts do not depend on which worker wins. The report says how many
of each kind went out; the test, not this script, knows which drop reason each kind must get.

Phases per SA (sequence numbers s):
  A  s = 1..N one at a time: tampered copies, the valid packet, wait for its answer, replays.
  B  a jump to s = JUMP (answered); `old` packets at never-used s far left of the window;
     one never-used s inside the window (answered: the window tolerates reordering);
     replays of both.
  C  a burst of BURST valid packets without waiting, each followed by hostile packets
     (a tampered copy before it, a replay and a wrong-SPI packet after it), then the answers
     are collected.
  D  a drain: any further answer on the SA is counted as `extra` (a replay that got through).

Usage: esp_injector.py JSON | @FILE   where JSON (or FILE's contents) is
  {"sas": [SA, ...], "timeout": seconds per answer}
and each SA holds
  name, suite ("aes256gcm16" | "aes128gcm16" | "aes256-sha256"), esn (bool)
  out_spi, out_enc, out_integ   the SA this script encrypts with (Cloister's inbound)
  in_spi, in_enc, in_integ      the SA it decrypts with (Cloister's outbound)
  local, remote                 outer addresses (this script's, Cloister's)
  udp                           null, or [this script's port, Cloister's port]
  udp_port_for_raw              Cloister's ESP-in-UDP port, for `wrong_encap` of a raw SA
  ordered                       optional, default: whether `udp` is set (see above)
  site_host, cloud_host         inner addresses (same family)
Prints one JSON line per SA: {"name", "valid": n, "answered": n, "extra": n,
"datagrams": n (all sent to Cloister), "sent": {kind: n}, "errors": [...]}; exit status 0 iff every valid packet was answered and no
extra answer came. Every loop and wait is bounded; addresses must be in 198.18.0.0/15 or
2001:db8::/32.
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
    # name: (scapy cipher, scapy integrity, IV bytes, ICV bytes, CBC?)
    "aes128gcm16": ("AES-GCM", "NULL", 8, 16, False),
    "aes256gcm16": ("AES-GCM", "NULL", 8, 16, False),
    "aes256-sha256": ("AES-CBC", "SHA2-256-128", 16, 16, True),
}
TEST_NETS = [ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:db8::/32")]
N = 6  # phase A
JUMP = 6000  # phase B: far enough that 1..N+8 fall out of the default 4096-packet window
BURST = 24  # phase C
MAX_TIMEOUT = 10.0
SPARE = 100_000  # tampered copies of s + SPARE where order is not guaranteed (see `ordered`)
UNKNOWN_SPI = 0xDEAD0001
ECHO_ID = 0x66


def check_addr(a):
    ip = ipaddress.ip_address(a)
    if not any(ip in n for n in TEST_NETS):
        raise SystemExit(f"refusing address outside the test ranges: {a}")
    return ip


class Peer:
    def __init__(self, c, timeout):
        for a in (c["local"], c["remote"], c["site_host"], c["cloud_host"]):
            check_addr(a)
        self.c = c
        self.timeout = min(float(timeout), MAX_TIMEOUT)
        self.v6 = check_addr(c["local"]).version == 6
        self.inner_v6 = check_addr(c["site_host"]).version == 6
        crypt, auth, self.iv, self.icv, self.cbc = SUITES[c["suite"]]
        fam = IPv6 if self.v6 else IP
        self.udp = c.get("udp")
        nat_t = UDP(sport=self.udp[0], dport=self.udp[1]) if self.udp else None

        def sa(spi, enc, integ, hdr, nat):
            return SecurityAssociation(
                ESP, spi=spi, crypt_algo=crypt, crypt_key=bytes.fromhex(enc),
                auth_algo=auth, auth_key=bytes.fromhex(integ) if integ else None,
                tunnel_header=hdr, nat_t_header=nat, esn_en=c["esn"], esn=0,
            )

        self.out_sa = sa(c["out_spi"], c["out_enc"], c.get("out_integ"),
                         fam(src=c["local"], dst=c["remote"]), nat_t)
        self.back = fam(src=c["remote"], dst=c["local"])
        self.in_sa = sa(c["in_spi"], c["in_enc"], c.get("in_integ"), self.back, None)
        self.remote_ip = ipaddress.ip_address(c["remote"])
        family = socket.AF_INET6 if self.v6 else socket.AF_INET
        # Both sockets exist for every SA: one carries the SA's ESP, the other `wrong_encap`.
        self.raw = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_ESP)
        self.dgram = socket.socket(family, socket.SOCK_DGRAM)
        self.dgram.bind((c["local"], self.udp[0] if self.udp else 0))
        self.rx = self.dgram if self.udp else self.raw
        self.sent = {}
        self.valid = 0
        self.answered = 0
        self.extra = 0
        self.errors = []
        self.pending = {}  # echo sequence number -> payload, for answers still awaited
        self.draining = False
        self.datagrams = 0  # everything sent to Cloister, valid or not
        # Whether Cloister reads this SA's packets in order (one socket, one worker): then a
        # tampered copy goes out just before the valid packet of the same sequence number. A
        # raw ESP socket is shared by the workers, which may overtake one another: there the
        # tampered copies are of spare sequence numbers that are never sent valid.
        self.ordered = bool(c.get("ordered", self.udp))

    def close(self):
        self.raw.close()
        self.dgram.close()

    # ---- building ---------------------------------------------------------------------

    def payload(self, s):
        return bytes((s * 13 + j) & 0xFF for j in range(48))

    def esp(self, s):
        """The ESP bytes (header to ICV) of the valid echo request with sequence number s."""
        c = self.c
        if self.inner_v6:
            inner = IPv6(src=c["site_host"], dst=c["cloud_host"], hlim=64) / ICMPv6EchoRequest(
                id=ECHO_ID, seq=s & 0xFFFF) / Raw(self.payload(s))
        else:
            inner = IP(src=c["site_host"], dst=c["cloud_host"], ttl=64) / ICMP(
                id=ECHO_ID, seq=s & 0xFFFF) / Raw(self.payload(s))
        return bytes(self.out_sa.encrypt(inner, seq_num=s)[ESP])

    # ---- sending ----------------------------------------------------------------------

    def send_raw(self, data):
        self.raw.sendto(data, (self.c["remote"], 0))
        self.datagrams += 1

    def send_udp(self, data, port):
        self.dgram.sendto(data, (self.c["remote"], port))
        self.datagrams += 1

    def send(self, data, kind=None):
        """Sends ESP bytes the SA's way; `kind` names a hostile packet for the report."""
        if self.udp:
            self.send_udp(data, self.udp[1])
        else:
            self.send_raw(data)
        if kind:
            self.sent[kind] = self.sent.get(kind, 0) + 1

    def send_valid(self, s, data):
        self.send(data)
        self.valid += 1
        self.pending[s & 0xFFFF] = self.payload(s)

    def victim(self, s, data):
        """What to tamper with for sequence number s (see `ordered`)."""
        return data if self.ordered else self.esp(SPARE + s)

    def flip(self, data, at):
        b = bytearray(data)
        b[at] ^= 0x10
        return bytes(b)

    def tampered(self, data):
        """(kind, bytes) of every tampered copy of one valid packet that reaches the enclave
        or its length checks, none of them changing header fields."""
        hdr = 8
        out = [
            ("flip_iv", self.flip(data, hdr)),
            ("flip_ct", self.flip(data, hdr + self.iv + 3)),
            ("flip_icv", self.flip(data, len(data) - 1)),
        ]
        if self.cbc:
            out.append(("cut_tail", data[:-16]))
            out.append(("misaligned", data[:-1]))
        else:
            out.append(("cut_tail", data[:-1]))
            out.append(("cut_tail", data[:-4]))
        shortest = hdr + self.iv + 2 + self.icv
        for n in sorted({hdr, hdr + 1, hdr + self.iv, hdr + self.iv + self.icv, shortest - 1}):
            out.append(("short_body", data[:n]))
        return out

    def short_headers(self, data):
        """Truncations below the ESP header. Over UDP, 1 byte is only a keepalive when it is
        0xff, and 4+ bytes are IKE only behind four zero bytes: an SPI is never 0."""
        lengths = [1, 2, 3, 4, 5, 7] if self.udp else [1, 3, 4, 7]
        assert data[0] != 0xFF and data[:4] != b"\0\0\0\0"
        return [("empty", b"")] + [("short_header", data[:n]) for n in lengths]

    def wrong_spi(self, data):
        out = []
        for spi in (UNKNOWN_SPI, self.c["in_spi"]):
            out.append(("wrong_spi", struct.pack("!L", spi) + data[4:]))
        return out

    def send_wrong_encap(self, data):
        if self.udp:
            self.send_raw(data)
        else:
            self.send_udp(data, self.c["udp_port_for_raw"])
        self.sent["wrong_encap"] = self.sent.get("wrong_encap", 0) + 1

    # ---- receiving --------------------------------------------------------------------

    def receive(self, until):
        """Reads answers until `until` (monotonic) or until none is pending; checks each."""
        while time.monotonic() < until:
            if not self.pending and until - time.monotonic() > 0 and not self.draining:
                return
            r, _, _ = select.select([self.rx], [], [], max(0.0, min(0.2, until - time.monotonic())))
            if not r:
                continue
            data, src = self.rx.recvfrom(65535)
            if not self.udp and not self.v6:
                data = data[(data[0] & 0x0F) * 4:]  # raw IPv4 sockets include the IP header
            if self.udp and (data == b"\xff" or data[:4] == b"\0\0\0\0"):
                continue  # a NAT-keepalive or an IKE message
            if ipaddress.ip_address(src[0]) != self.remote_ip or len(data) < 8:
                continue
            if struct.unpack("!L", data[:4])[0] != self.c["in_spi"]:
                continue  # another SA's answer (a raw socket sees all ESP)
            self.check_answer(data)

    def check_answer(self, data):
        u = self.udp
        try:
            pkt = self.back / (UDP(sport=u[1], dport=u[0]) / ESP(data) if u else ESP(data))
            pkt = (IPv6 if self.v6 else IP)(bytes(pkt))
            dec = self.in_sa.decrypt(pkt)
        except Exception as e:  # an undecryptable answer is a failure, reported
            self.errors.append(f"decrypt: {type(e).__name__}: {e}")
            return
        if self.inner_v6:
            rep = dec.getlayer(ICMPv6EchoReply)
            body = bytes(rep.data) if rep is not None else None
        else:
            rep = dec.getlayer(ICMP)
            body = bytes(rep.payload) if rep is not None and rep.type == 0 else None
        if rep is None or body is None or rep.id != ECHO_ID or \
                rep.underlayer.src != self.c["cloud_host"] or rep.underlayer.dst != self.c["site_host"]:
            self.errors.append(f"unexpected inner packet {dec.summary()}")
            return
        want = self.pending.pop(rep.seq, None)
        if want is None:
            self.extra += 1
            self.errors.append(f"an answer nobody awaited: echo seq {rep.seq} (a replay got through?)")
        elif want != body:
            self.errors.append(f"echo seq {rep.seq}: payload differs")
        else:
            self.answered += 1

    def await_answers(self):
        self.receive(time.monotonic() + self.timeout)
        for seq in sorted(self.pending):
            self.errors.append(f"echo seq {seq}: no valid answer within {self.timeout} s")
        self.pending.clear()

    # ---- the schedule -----------------------------------------------------------------

    def run(self):
        # A: one at a time.
        for s in range(1, N + 1):
            data = self.esp(s)
            if s == 1:
                for kind, bad in self.short_headers(data):
                    self.send(bad, kind)
            if s == 2:
                for kind, bad in self.wrong_spi(data):
                    self.send(bad, kind)
            if s == 3:
                self.send_wrong_encap(data)
            for kind, bad in self.tampered(self.victim(s, data)):
                self.send(bad, kind)
            self.send_valid(s, data)
            self.await_answers()
            for _ in range(1 if s % 2 else 3):
                self.send(data, "replay")
            time.sleep(0.02)
        # B: the window jumps; never-used numbers left of it are refused, inside it accepted.
        top = self.esp(JUMP)
        self.send_valid(JUMP, top)
        self.await_answers()
        for s in range(N + 1, N + 9):
            self.send(self.esp(s), "old")
        inside = self.esp(JUMP - 10)
        for kind, bad in self.tampered(self.victim(JUMP - 10, inside))[:3]:
            self.send(bad, kind)
        self.send_valid(JUMP - 10, inside)
        self.await_answers()
        for d in (top, inside):
            self.send(d, "replay")
        self.send(self.esp(1), "old")  # used long ago, re-encrypted: left of the window
        time.sleep(0.02)
        # C: a burst, paced a little so that no socket buffer overflows (the kernel would
        # drop silently and the counts would not add up).
        prev = None
        for k in range(BURST):
            s = JUMP + 1 + k
            data = self.esp(s)
            kind, bad = self.tampered(self.victim(s, data))[k % 3]
            self.send(bad, kind)
            self.send_valid(s, data)
            if prev is not None:
                self.send(prev, "replay")
            kind, bad = self.wrong_spi(data)[k % 2]
            self.send(bad, kind)
            prev = data
            if k % 4 == 3:
                time.sleep(0.002)
        self.await_answers()
        # D: nothing more may come.
        self.draining = True
        self.receive(time.monotonic() + 0.5)
        return {
            "name": self.c.get("name", ""),
            "valid": self.valid,
            "answered": self.answered,
            "extra": self.extra,
            "datagrams": self.datagrams,
            "sent": dict(sorted(self.sent.items())),
            "errors": self.errors[:20],
        }


def main():
    arg = sys.argv[1]
    if arg.startswith("@"):
        with open(arg[1:], encoding="utf-8") as f:
            arg = f.read()
    spec = json.loads(arg)
    all_ok = True
    for c in spec["sas"]:
        peer = Peer(c, spec.get("timeout", 3))
        try:
            report = peer.run()
        finally:
            peer.close()
        print(json.dumps(report), flush=True)
        all_ok = all_ok and report["answered"] == report["valid"] and report["extra"] == 0 \
            and not report["errors"]
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()

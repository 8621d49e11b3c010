#!/usr/bin/env python3
"""Known-answer ESP vectors for crates/esp, made by scapy's ESP implementation (independent
of Cloister). Run with the project's venv: .deps/venv/bin/python gen_scapy.py

  gen_scapy.py                    (re)writes <name>.outer.bin and <name>.inner.bin here
  gen_scapy.py decrypt NAME HEX   decrypts an outer packet (hex) with vector NAME's SA and
                                  prints the inner packet in hex (used by tests/scapy_vectors.rs)

The parameters below are mirrored in tests/scapy_vectors.rs. IVs are chosen to be what
Cloister's enclave generates, so that Cloister's encapsulation can be compared byte for
byte: the 64-bit sequence number for the AEADs (RFC 4106 §3.1, RFC 7634 §2), and
AES-ECB(key, "ESPCBCIV" || seq) for AES-CBC (NIST SP 800-38A Appendix C).
Addresses are from 198.18.0.0/15 and 2001:db8::/32 only.
"""
import os
import struct
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.packet import Raw

HERE = os.path.dirname(os.path.abspath(__file__))


def cbc_iv(key, seq):
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(b"ESPCBCIV" + struct.pack("!Q", seq)) + enc.finalize()


def inner_v4():
    return IP(src="198.18.10.10", dst="198.18.20.20", ttl=64, id=0x4242) / UDP(sport=1234, dport=5678) / Raw(
        b"cloister known-answer payload, v4")


def inner_v6():
    return IPv6(src="2001:db8:a::10", dst="2001:db8:b::20", hlim=64) / UDP(sport=1234, dport=5678) / Raw(
        b"cloister known-answer payload, v6 over UDP")


VECTORS = {
    # AES-GCM-16 with a 128-bit key, raw ESP over IPv4, no ESN.
    "gcm128-v4": dict(
        spi=0x0000A001, seq=7, esn=False,
        crypt_algo="AES-GCM", crypt_key=bytes(range(0x10, 0x20)) + bytes.fromhex("a0a1a2a3"),
        auth_algo="NULL", auth_key=None,
        tunnel=IP(src="198.18.0.1", dst="198.18.0.2"), nat_t=None, inner=inner_v4,
    ),
    # AES-CBC-128 with HMAC-SHA2-256-128, raw ESP over IPv4, no ESN.
    "cbc128-sha256-v4": dict(
        spi=0x0000A002, seq=9, esn=False,
        crypt_algo="AES-CBC", crypt_key=bytes(range(0x30, 0x40)),
        auth_algo="SHA2-256-128", auth_key=bytes(range(0x40, 0x60)),
        tunnel=IP(src="198.18.0.1", dst="198.18.0.2"), nat_t=None, inner=inner_v4,
    ),
    # ChaCha20-Poly1305, ESP-in-UDP over IPv6, ESN with the high half 1.
    "chacha-esn-udp-v6": dict(
        spi=0x0000A003, seq=(1 << 32) | 5, esn=True,
        crypt_algo="CHACHA20-POLY1305", crypt_key=bytes(range(0x60, 0x80)) + bytes.fromhex("b0b1b2b3"),
        auth_algo="NULL", auth_key=None,
        tunnel=IPv6(src="2001:db8::a", dst="2001:db8::b"), nat_t=UDP(sport=4500, dport=4501), inner=inner_v6,
    ),
}


def security_association(v):
    return SecurityAssociation(
        ESP, spi=v["spi"], crypt_algo=v["crypt_algo"], crypt_key=v["crypt_key"],
        auth_algo=v["auth_algo"], auth_key=v["auth_key"],
        tunnel_header=v["tunnel"], nat_t_header=v["nat_t"],
        esn_en=v["esn"], esn=v["seq"] >> 32,
    )


def iv_for(v):
    if v["crypt_algo"] == "AES-CBC":
        return cbc_iv(v["crypt_key"], v["seq"])
    return struct.pack("!Q", v["seq"])


def generate():
    for name, v in VECTORS.items():
        sa = security_association(v)
        inner = v["inner"]()
        outer = sa.encrypt(inner, seq_num=v["seq"] & 0xFFFFFFFF, iv=iv_for(v))
        with open(os.path.join(HERE, name + ".outer.bin"), "wb") as f:
            f.write(bytes(outer))
        with open(os.path.join(HERE, name + ".inner.bin"), "wb") as f:
            f.write(bytes(inner))
        # Self-check: scapy decrypts its own packet back to the inner one.
        assert bytes(security_association(v).decrypt(outer.__class__(bytes(outer)))) == bytes(inner)
        print(name, len(bytes(outer)), "bytes")


def decrypt(name, hexdata):
    v = VECTORS[name]
    raw = bytes.fromhex(hexdata)
    pkt = IP(raw) if raw[0] >> 4 == 4 else IPv6(raw)
    inner = security_association(v).decrypt(pkt)
    print(bytes(inner).hex())


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "decrypt":
        decrypt(sys.argv[2], sys.argv[3])
    else:
        generate()

#!/usr/bin/env python3
"""The tenant's side of the key-exposure test (crates/enclave/tests/key_exposure.rs).

It runs in its own process so that no key byte ever exists in the process under test (the
untrusted gateway): it wraps the PSK for the enclave, answers IKE_SA_INIT (X25519), derives
every key with an independent implementation of RFC 7296 (Python's hmac + `cryptography`),
encrypts ESP packets for the gateway's inbound SA (RFC 4106) and checks the gateway's
outbound packets. Keys go back to the test only masked (each byte XOR MASK), so the test
can search memory for them without holding them.

Protocol, one "name value" pair per line, a blank line ends a message:
  in:  prov_key tenant ni ke_i spi_i spi_r child_gw_in child_gw_out packets inner_len
  out: wrapped_psk ke_r nr id_r auth_r, masked_<key> for each key, packet_<k> for each ESP
       packet
  in:  out_<k> for each packet the gateway encrypted
  out: verified <count>
"""
import hashlib
import hmac
import os
import struct
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

MASK = 0x5A
PSK_KIND = 1  # SecretKind::PreSharedKey


def read_message():
    msg = {}
    for line in sys.stdin:
        line = line.strip()
        if not line:
            break
        name, value = line.split(" ", 1)
        msg[name] = value
    return msg


def send(pairs):
    for name, value in pairs:
        sys.stdout.write(f"{name} {value}\n")
    sys.stdout.write("\n")
    sys.stdout.flush()


def prf(key, data):
    return hmac.new(key, data, hashlib.sha256).digest()


def prf_plus(key, seed, length):
    out, t, n = b"", b"", 1
    while len(out) < length:
        t = prf(key, t + seed + bytes([n]))
        out += t
        n += 1
    return out[:length]


def inner(k, length):
    return bytes((k * 31 + j) & 0xFF for j in range(length))


def esp_payload(data):
    """Payload, monotonic padding to a 4-byte boundary, Pad Length, Next Header 4."""
    pad = (-(len(data) + 2)) % 4
    return data + bytes(range(1, pad + 1)) + bytes([pad, 4])


def masked(b):
    return bytes(x ^ MASK for x in b).hex()


def main():
    m = read_message()
    prov_key = bytes.fromhex(m["prov_key"])
    tenant = int(m["tenant"])
    ni, ke_i = bytes.fromhex(m["ni"]), bytes.fromhex(m["ke_i"])
    spi_i, spi_r = int(m["spi_i"]), int(m["spi_r"])
    gw_in, gw_out = int(m["child_gw_in"]), int(m["child_gw_out"])
    count, inner_len = int(m["packets"]), int(m["inner_len"])

    # The tenant wraps its PSK for the enclave (crate::provision format v1).
    psk = os.urandom(32)
    header = b"CLPV" + bytes([1, PSK_KIND, 0, 0]) + struct.pack(">I", tenant)
    nonce = os.urandom(12)
    wrapped = header + nonce + AESGCM(prov_key).encrypt(nonce, psk, header)

    # IKE_SA_INIT as responder: X25519, SKEYSEED, SK_* (RFC 7296 §2.14).
    priv = X25519PrivateKey.generate()
    ke_r = priv.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    g_ir = priv.exchange(X25519PublicKey.from_public_bytes(ke_i))
    nr = os.urandom(32)
    skeyseed = prf(ni + nr, g_ir)
    # AES-GCM-16-256 with PRF-HMAC-SHA-256: SK_a* are empty, SK_e* are key + 4-byte salt.
    lens = [("sk_d", 32), ("sk_ai", 0), ("sk_ar", 0), ("sk_ei", 36), ("sk_er", 36), ("sk_pi", 32), ("sk_pr", 32)]
    stream = prf_plus(skeyseed, ni + nr + struct.pack(">QQ", spi_i, spi_r), sum(n for _, n in lens))
    keys, at = {}, 0
    for name, n in lens:
        keys[name] = stream[at:at + n]
        at += n
    # Child SA KEYMAT (§2.17): initiator-to-responder first. The gateway initiated.
    keymat = prf_plus(keys["sk_d"], ni + nr, 72)
    esp_i2r, esp_r2i = keymat[:36], keymat[36:]

    # The responder's AUTH (§2.15) over its IKE_SA_INIT response as the enclave's
    # transcript expects it (enclave_api::testing::sa_init_message: SA, KE, Nonce), Ni and
    # prf(SK_pr, IDr'): the enclave derives the child SA only once it verified this.
    ke_payload = bytes([40, 0]) + struct.pack(">HH", 8 + len(ke_r), 31) + bytes(2) + ke_r
    nonce_payload = bytes([0, 0]) + struct.pack(">H", 4 + len(nr)) + nr
    body = bytes([34, 0, 0, 4]) + ke_payload + nonce_payload
    msg2 = struct.pack(">QQ", spi_i, spi_r) + bytes([33, 0x20, 34, 0x20]) + bytes(4)
    msg2 += struct.pack(">I", 28 + len(body)) + body
    id_r = bytes([1, 0, 0, 0, 198, 18, 0, 2])
    auth_r = prf(prf(psk, b"Key Pad for IKEv2"), msg2 + ni + prf(keys["sk_pr"], id_r))

    out = [("wrapped_psk", wrapped.hex()), ("ke_r", ke_r.hex()), ("nr", nr.hex())]
    out += [("id_r", id_r.hex()), ("auth_r", auth_r.hex())]
    out.append(("masked_psk", masked(psk)))
    for name in ("sk_d", "sk_ei", "sk_er", "sk_pi", "sk_pr"):
        out.append((f"masked_{name}", masked(keys[name])))
    out += [("masked_esp_gw_out", masked(esp_i2r)), ("masked_esp_gw_in", masked(esp_r2i))]

    # ESP packets the gateway's inbound SA must accept (RFC 4106: nonce = salt | IV).
    aead, salt = AESGCM(esp_r2i[:32]), esp_r2i[32:]
    for k in range(count):
        seq = k + 1
        head = struct.pack(">II", gw_in, seq)
        iv = struct.pack(">Q", seq)
        ct = aead.encrypt(salt + iv, esp_payload(inner(k, inner_len)), head)
        out.append((f"packet_{k}", (head + iv + ct).hex()))
    send(out)

    # The gateway's outbound packets must decrypt to the agreed inner packets.
    m = read_message()
    aead, salt = AESGCM(esp_i2r[:32]), esp_i2r[32:]
    verified = 0
    for k in range(count):
        pkt = bytes.fromhex(m[f"out_{k}"])
        spi, seq = struct.unpack(">II", pkt[:8])
        try:
            plain = aead.decrypt(salt + pkt[8:16], pkt[16:], pkt[:8])
        except InvalidTag:
            continue
        if spi == gw_out and plain == esp_payload(inner(k, inner_len)):
            verified += 1
    send([("verified", str(verified))])


if __name__ == "__main__":
    main()

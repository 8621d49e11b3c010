"""Splits a pcap of IKE/ESP-in-UDP traffic into wire test vectors (one file per message).

ike-<fam>-NN-<exchange>-<req|resp>.bin : IKE message (UDP payload, non-ESP marker removed)
esp-<fam>-NN.bin                       : ESP packet (UDP payload starting at the SPI)
ip-<fam>-NN-<ike|esp>.bin              : the whole outer IP packet, for the IP/UDP views
"""
import sys
from scapy.all import rdpcap, IP, IPv6, UDP

EXCHANGES = {34: "sa_init", 35: "auth", 36: "create_child", 37: "informational"}

def main(pcap, out, fam):
    n_ike = n_esp = n_ip = 0
    for pkt in rdpcap(pcap):
        ip = pkt[IP] if IP in pkt else pkt[IPv6] if IPv6 in pkt else None
        if ip is None or UDP not in pkt:
            continue
        payload = bytes(pkt[UDP].payload)
        kind = None
        if pkt[UDP].dport == 4500 or pkt[UDP].sport == 4500:
            if payload == b"\xff":
                continue
            if payload[:4] == b"\0\0\0\0":
                payload, kind = payload[4:], "ike"
            else:
                kind = "esp"
        else:
            kind = "ike"
        if kind == "ike":
            ex = EXCHANGES.get(payload[18], f"x{payload[18]}")
            rr = "resp" if payload[19] & 0x20 else "req"
            name = f"ike-{fam}-{n_ike:02d}-{ex}-{rr}.bin"
            n_ike += 1
        else:
            name = f"esp-{fam}-{n_esp:02d}.bin"
            n_esp += 1
        open(f"{out}/{name}", "wb").write(payload)
        if n_ip < 6 and (kind == "esp" or n_ip < 3):
            open(f"{out}/ip-{fam}-{n_ip:02d}-{kind}.bin", "wb").write(bytes(ip))
            n_ip += 1
    print(f"{fam}: {n_ike} IKE messages, {n_esp} ESP packets, {n_ip} IP packets")
    if n_ike < 8 or n_esp < 4:
        sys.exit(f"capture too small: {n_ike} IKE, {n_esp} ESP")



KEY_LABELS = ("shared Diffie Hellman secret", "SKEYSEED", "Sk_d secret", "Sk_ai secret",
              "Sk_ar secret", "Sk_ei secret", "Sk_er secret", "Sk_pi secret", "Sk_pr secret",
              "octets = message + nonce + prf(Sk_px, IDx')", "AUTH = prf(prf(secret, keypad), octets)",
              "encryption initiator key", "encryption responder key", "IDx'", "SK_p",
              "prf(secret, keypad)")

def trim_log(src, dst):
    """Keeps the key-derivation dumps and exchange summaries of a level-4 charon log."""
    keep, out = False, []
    for line in open(src, errors="replace"):
        body = line.split("] ", 1)[-1].rstrip("\n")
        if " => " in body and " bytes @ " in body:
            keep = body.split(" => ")[0] in KEY_LABELS
            if keep:
                out.append(line)
            continue
        if keep and body[:6].strip().rstrip(":").isdigit():
            out.append(line)
            continue
        keep = False
        if ("[ENC] generating " in line or "[ENC] parsed " in line) and " [ " in line \
                or "established" in line or "rekey" in line:
            out.append(line)
    open(dst, "w").writelines(out)


if __name__ == "__main__":
    if sys.argv[1] == "--trim-log":
        trim_log(sys.argv[2], sys.argv[3])
    else:
        main(*sys.argv[1:4])

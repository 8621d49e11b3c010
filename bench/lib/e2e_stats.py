#!/usr/bin/env python3
"""Helpers of bench/esp-e2e.sh (system python3, standard library only).

  e2e_stats.py extract TEST FILE      one iperf3 --json result -> "value loss_percent"
      tcp1, tcp4: receiver Mbit/s (end.sum_received); udp64, udp1372: packets per second
      received at the far end ((packets - lost) / seconds, from the server's figures that
      iperf3 reports in end.sum), and the loss in percent. Prints "nan nan" on an error.
  e2e_stats.py summary RESULTS VARIANTS...
      RESULTS holds lines "round variant test value loss"; prints one table row per variant
      and test (median, min-max, rounds; loss medians for UDP), and the last lines
      esp e2e tcp1 ratio vs best peer=<r> udp64 ratio vs best peer=<r>   (static SAs)
      esp e2e product tcp1 ratio vs best peer=<r> udp64 ratio vs best peer=<r> raw/udp=<r>
      where a peer is strongswan, boringtun, wireguard-go or wireguard-go-upstream (the best median of them), the
      product is `gateway` (cloister gateway, IKE, process enclave, raw ESP) and raw/udp the
      lowest over the tests of its median against `gateway-udp`'s (ESP-in-UDP).
  e2e_stats.py losses LOSSES VARIANTS...
      LOSSES holds lines "round variant test site_gw_tx_drops cloud_gw_rcvbuf cloud_host_rcvbuf
      cloud_gw_raw_drops"
      (per-namespace counter deltas over one test); prints their medians per variant and
      test: where the datagrams that iperf3 counts as lost went (and, for TCP, where the
      segments it retransmitted were lost).
"""
import json
import math
import statistics
import sys

TESTS = ["tcp1", "tcp4", "udp64", "udp1372"]
PEERS = ["strongswan", "boringtun", "wireguard-go", "wireguard-go-upstream"]
UNITS = {"tcp1": "Mbit/s", "tcp4": "Mbit/s", "udp64": "pkt/s", "udp1372": "pkt/s"}


def extract(test, path):
    try:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        if "error" in j:
            raise ValueError(j["error"])
        end = j["end"]
        if test.startswith("tcp"):
            return end["sum_received"]["bits_per_second"] / 1e6, 0.0
        s = end["sum"]
        received = s["packets"] - s["lost_packets"]
        return received / s["seconds"], s["lost_percent"]
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        print(f"[esp-e2e] {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return math.nan, math.nan


def fmt(test, v):
    if math.isnan(v):
        return "n/a"
    if test.startswith("tcp"):
        return f"{v:.0f}"
    return f"{v / 1000:.1f}k"


def rows(path, values, convert):
    """Lines "round variant test VALUE..." with `values` values each, converted: a dict from
    (variant, test) to the list of value lists, in file order. Other lines are skipped."""
    data = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3 + values:
                continue
            try:
                converted = [convert(x) for x in parts[3:]]
            except ValueError:
                continue
            data.setdefault((parts[1], parts[2]), []).append(converted)
    return data


def summary(path, variants):
    data = rows(path, 2, float)
    med = {}
    print(f"{'variant':<22} {'test':<8} {'median':>9} {'min-max':>19} {'unit':<7} {'loss% (median)':>14}  rounds")
    for variant in variants:
        for test in TESTS:
            runs = data.get((variant, test), [])
            vals = [v for v, _ in runs if not math.isnan(v)]
            losses = [l for _, l in runs if not math.isnan(l)]
            if vals:
                m = statistics.median(vals)
                med[(variant, test)] = m
                rng = f"{fmt(test, min(vals))}-{fmt(test, max(vals))}"
            else:
                m = math.nan
                rng = "n/a"
            loss = f"{statistics.median(losses):.1f}" if test.startswith("udp") and losses else ""
            failed = len(runs) - len(vals)
            note = f"{len(vals)}" + (f" ({failed} failed)" if failed else "")
            print(f"{variant:<22} {test:<8} {fmt(test, m):>9} {rng:>19} {UNITS[test]:<7} {loss:>14}  {note}")

    def ratio(test, variant="cloister"):
        mine = med.get((variant, test))
        peers = [(med[(p, test)], p) for p in PEERS if (p, test) in med]
        if mine is None or not peers:
            return "n/a", ""
        best, who = max(peers)
        return f"{mine / best:.2f}", who

    r1, p1 = ratio("tcp1")
    r64, p64 = ratio("udp64")
    plain = [f"{t} {med[('cloister', t)] / med[('plain', t)]:.2f}" for t in TESTS
             if ("cloister", t) in med and ("plain", t) in med]
    print(f"best peer: tcp1 {p1 or 'n/a'}, udp64 {p64 or 'n/a'}; cloister vs plain routing: {', '.join(plain) or 'n/a'}")
    print(f"esp e2e tcp1 ratio vs best peer={r1} udp64 ratio vs best peer={r64}")
    if any(v.startswith("gateway") for v in variants):
        g1, _ = ratio("tcp1", "gateway")
        g64, _ = ratio("udp64", "gateway")
        per_test = {t: med[("gateway", t)] / med[("gateway-udp", t)] for t in TESTS
                    if ("gateway", t) in med and ("gateway-udp", t) in med and med[("gateway-udp", t)] > 0}
        raw_udp = f"{min(per_test.values()):.2f}" if per_test else "n/a"
        print("product raw ESP / ESP-in-UDP: " + (", ".join(f"{t} {r:.2f}" for t, r in per_test.items()) or "n/a"))
        print(f"esp e2e product tcp1 ratio vs best peer={g1} udp64 ratio vs best peer={g64} raw/udp={raw_udp}")


def losses(path, variants):
    data = rows(path, 4, int)
    if not data:
        return
    print("where packets were lost, per test (medians over the rounds):")
    print(f"{'variant':<22} {'test':<8} {'site-gw tx drops':>17} {'cloud-gw rcvbuf':>16} {'cloud-host rcvbuf':>18}"
          f" {'cloud-gw raw drops':>19}")
    for variant in variants:
        for test in TESTS:
            runs = data.get((variant, test))
            if not runs:
                continue
            med = [statistics.median(c[i] for c in runs) for i in range(4)]
            print(f"{variant:<22} {test:<8} {med[0]:>17.0f} {med[1]:>16.0f} {med[2]:>18.0f} {med[3]:>19.0f}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        v, l = extract(sys.argv[2], sys.argv[3])
        print(f"{v} {l}")
    elif len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "losses":
        losses(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Provisioning simulator benchmark: 24 h of 10,000 tunnels at 1-minute resolution,
# 10-minute consolidation, Cloister's policy (synthetic trace, seed 1, generated in memory).
# The time covers the whole command: trace generation, the reserve model (hourly
# convolution of 10,000 usage histograms) and the simulation. Single-threaded by design.
# Last line: provision sim 10k tunnels seconds=<s> saving=<x> guarantee=<y>
set -euo pipefail
cd "$(dirname "$0")/.."

POLICY="${POLICY:-cloister}"
cargo build --release -p cloister --quiet
BIN=target/release/cloister

start=$(date +%s.%N)
out=$("$BIN" simulate --synthetic 10000 --seed 1 --minutes 24h --interval 10m \
    --policy "$POLICY" --no-plots --summary)
end=$(date +%s.%N)

echo "$out"
line=$(grep '^result ' <<<"$out" | tail -n 1)
saving=$(sed -E 's/.* saving=([0-9.]+).*/\1/' <<<"$line")
guarantee=$(sed -E 's/.* guarantee_p99=([0-9.]+).*/\1/' <<<"$line")
seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
echo "provision sim 10k tunnels seconds=${seconds} saving=${saving} guarantee=${guarantee}"

#!/usr/bin/env bash
# ESP data path in memory, one core: the whole `esp` path (policy/SA lookup, sequence
# numbers, anti-replay, one inline-enclave crossing per batch of 32, encapsulation and
# decapsulation) against a raw ring AES-256-GCM seal loop of the same payloads, interleaved
# in one run; then one SA on one and on two worker threads sharing one enclave. Prints
# medians (min-max) over ROUNDS rounds; last line:
#   esp inmem ratio 64B=<r> 1420B=<r>
# Usage: bench/esp-inmem.sh [ROUNDS]   (default 7)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-7}"
cargo bench -q -p cloister-esp --bench inmem --no-run 2>&1 | grep -v '^$' || true
exec cargo bench -q -p cloister-esp --bench inmem -- "$rounds"

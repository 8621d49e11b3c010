#!/usr/bin/env bash
# Enclave benchmark: ESP encrypt and decrypt packets/s per core with the inline and the
# process backend (pipelined submit_esp/complete_esp, and synchronous esp_batch) for 64, 512
# and 1420 byte packets in batches of 32, AES-GCM-16-256, and the ratio process/inline; the
# round trip of one crossing; trusted memory for 1000 ESP SAs and 1000 IKE SAs.
# Rounds interleave the backends; figures are medians [min-max]. Method: docs/bench-enclave.md.
# Knobs: ROUNDS (7), RUN_MS (120 ms per measurement), DEPTH (3 pipelined batches), PIN (1: the
# gateway thread on CPU 0, the enclave process and the inline runs on CPU 1; 0: unpinned).
# Last line: enclave process/inline 64B=<r> 1420B=<r>
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"

# The enclave process's program (the bench starts the one Cargo built with it, or
# CLOISTER_ENCLAVE_BIN), then the benchmark itself (profile bench = release).
cargo build --release --quiet -p cloister-enclave --bin cloister-enclave-process
cargo bench --quiet -p cloister-enclave --bench enclave --no-run
cargo bench --quiet -p cloister-enclave --bench enclave

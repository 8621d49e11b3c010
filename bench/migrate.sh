#!/usr/bin/env bash
# Enclave state migration benchmark (docs/migration.md, crates/migrate/src/flow.rs): the time
# of one migration (source export, HSM rewrap or bulk decryption, destination import, deletion
# of the one-time keys) for state sizes 1 KB..200 MB, and 1/2/4/10 concurrent migrations, in
# three modes: hsm (envelope: only the data key goes through the HSM), baseline (enclave-only:
# the data key is wrapped straight to the destination enclave), hsm-bulk (TEEnder's original:
# the HSM also encrypts and decrypts the whole package). Inline enclaves, release build,
# RUNS runs each (median, min-max). Key generation is prepared before the clock starts.
# The SoftHSM2 token is made here in a temporary directory and removed afterwards.
# Plot: target/bench-migrate/migrate.png.
# Last line: migrate 100MB seconds hsm=<s> baseline=<s>
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ ! -e /usr/lib/softhsm/libsofthsm2.so ]; then
  echo "bench/migrate.sh: SoftHSM2 not installed (Debian softhsm2)" >&2
  exit 1
fi
TOKDIR=$(mktemp -d)
OUT="$ROOT/target/bench-migrate"
trap 'rm -rf "$TOKDIR"' EXIT
bash scripts/softhsm-init.sh "$TOKDIR" >/dev/null
export SOFTHSM2_CONF="$TOKDIR/softhsm2.conf"
rm -rf "$OUT"
export MIGRATE_OUT="$OUT"
export MIGRATE_RUNS="${RUNS:-5}"
export MIGRATE_SIZES="${SIZES:-1024,1048576,10485760,104857600,209715200}"
export MIGRATE_CONCURRENCY="${CONCURRENCY:-1,2,4,10}"
export MIGRATE_CONCURRENT_SIZE="${CONCURRENT_SIZE:-10485760}"
export MIGRATE_BITS="${BITS:-3072}"

cargo bench -p cloister-migrate --bench migrate --quiet 2>&1 | tee "$TOKDIR/bench.log" \
  | grep -v '^migrate 100MB' || true
grep '^migrate 100MB' "$TOKDIR/bench.log" | tail -n 1

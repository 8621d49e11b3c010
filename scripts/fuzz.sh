#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (FUZZ_SECONDS each, default 20) or, with
# FUZZ_RUNS set, for that many executions; seeds come from fuzz/corpus/<target>/ and new
# inputs go to a scratch copy, so the committed corpus only changes by hand.
# Skips with a notice where no nightly toolchain or cargo-fuzz is available.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.deps/cargo/bin:$PATH"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly' || ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "NOTICE: no nightly toolchain or cargo-fuzz here: fuzz runs skipped"; exit 0
fi
secs=${FUZZ_SECONDS:-20}
runs=${FUZZ_RUNS:-0}
targets=$(cd fuzz && cargo +nightly fuzz list)
[ -n "$targets" ] || { echo "no fuzz targets found"; exit 1; }
(cd fuzz && cargo +nightly fuzz build -O >/dev/null 2>&1) || (cd fuzz && cargo +nightly fuzz build -O)
for t in $targets; do
  scratch=$(mktemp -d /tmp/cloister-fuzz-$t.XXXXXX)
  mkdir -p "fuzz/corpus/$t"
  args=(-max_total_time="$secs" -print_final_stats=1)
  [ "$runs" != 0 ] && args=(-runs="$runs" -print_final_stats=1)
  set +e
  (cd fuzz && cargo +nightly fuzz run -O "$t" "$scratch" "corpus/$t" -- "${args[@]}") >"$scratch.log" 2>&1
  rc=$?
  set -e
  execs=$(grep -E '^stat::number_of_executed_units' "$scratch.log" | awk '{print $2}' | tail -1)
  if [ "$rc" -ne 0 ]; then
    tail -40 "$scratch.log"; echo "fuzz target $t FAILED"; rm -rf "$scratch"; exit 1
  fi
  echo "fuzz $t: ${execs:-?} executions, no crash"
  rm -rf "$scratch" "$scratch.log"
done

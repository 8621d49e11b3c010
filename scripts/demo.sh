#!/usr/bin/env bash
# Cloister's main job on the embedded default, as far as it is built today:
#  1. installs what is missing and builds Cloister (release);
#  2. brings up two strongSwan "on-premise sites" in network namespaces, lets them build an
#     IKEv2 tunnel (init, auth, child rekey, IKE rekey, delete) with pings through it, and
#     captures the wire;
#  3. decodes every captured IKE message and ESP-in-UDP packet with Cloister's wire codec
#     and checks each re-encodes byte-exactly;
#  4. runs the provisioning simulator on a synthetic 24-hour, 170-tunnel trace.
# Everything it creates (namespaces, processes, scratch files) is removed at the end; the
# simulator's plots are kept under target/demo/plots/.
# The gateway itself (enclave, ESP, IKE daemon) is not built yet: see README.md "Status".
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
./scripts/setup.sh
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
echo "== building Cloister (release)"
cargo build --release --locked -q -p cloister
BIN="$ROOT/target/release/cloister"
WORK=$(mktemp -d /tmp/cloister-demo.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo
echo "== two strongSwan sites build a tunnel in namespaces; the wire is captured"
./scripts/capture-wire-vectors.sh "$WORK/capture" | sed 's/^/   /' | grep -E 'IKE messages|vectors written'

echo
echo "== Cloister's wire codec decodes every captured message"
"$BIN" decode --check "$WORK"/capture/ike-v4-*.bin "$WORK"/capture/esp-v4-0[0-3].bin "$WORK"/capture/ip-v4-*.bin
echo "   ... and the IPv6 run:"
"$BIN" decode --check --summary "$WORK"/capture/ike-v6-*.bin "$WORK"/capture/esp-v6-*.bin "$WORK"/capture/ip-v6-*.bin

echo
echo "== provisioning simulator: synthetic 24 h trace, 170 tunnels, Protego's parameters"
"$BIN" simulate gen-trace --seed 7 --out "$WORK/trace.csv" >/dev/null
"$BIN" simulate --trace "$WORK/trace.csv" --out "$ROOT/target/demo/plots"
echo "   plots (demand vs capacity per interval, saving/guarantee trade-off): $ROOT/target/demo/plots/"
echo
echo "demo finished: namespaces, processes and scratch files removed"

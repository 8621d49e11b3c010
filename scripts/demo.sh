#!/usr/bin/env bash
# Cloister's main job on the embedded default: the multi-tenant service.
#  1. installs what is missing and builds Cloister (release);
#  2. makes two tenants' "on-premise sites" (strongSwan, kernel-libipsec) in network
#     namespaces, each with the SAME inner subnet (198.19.1.0/24), and each tenant's cloud
#     side in its own namespace (both 198.19.2.1);
#  3. starts `cloister serve` with the embedded store: one enclave process per tenant;
#  4. provisions both tenants' PSKs by attestation (`cloister tenant provision`: the tenant
#     verifies the enclave's evidence and measurement, then seals its PSK to the enclave);
#  5. the service brings both tunnels up; iperf3 pushes traffic through each;
#  6. prints the tenant and tunnel tables, then runs the key-exposure check (service process
#     memory, store, logs, config) with a positive control (strongSwan's memory);
#  7. runs the provisioning simulator, and removes everything it made.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
./scripts/setup.sh
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
echo "== building Cloister (release)"
cargo build --release --locked -q -p cloister
BIN="$ROOT/target/release/cloister"
WORK=$(mktemp -d /tmp/cloister-demo.XXXXXX)
TAG="cldemo$$"
NS=()
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done; kill -9 "$p" 2>/dev/null || true; done
  for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
mkns() { ip netns add "$1"; NS+=("$1"); ip -n "$1" link set lo up; }
in_ns() { local n=$1; shift; ip netns exec "$n" "$@"; }

SVC=$TAG-svc
mkns "$SVC"
PSK_acme="Demo-acme-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
PSK_blue="Demo-blue-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

echo
echo "== two tenants, overlapping address spaces"
cat > "$WORK/service.toml" <<EOF
[service]
state = "state.redb"
api = "127.0.0.1:9440"
api_token = "api.token"
EOF
i=0
for t in acme blue; do
  i=$((i + 1))
  SITE=$TAG-site$i CLOUD=$TAG-cloud$i NET=198.18.$i
  mkns "$SITE"; mkns "$CLOUD"
  ip link add wan0 netns "$SITE" type veth peer name wan$i netns "$SVC"
  ip -n "$SITE" addr add $NET.1/24 dev wan0; ip -n "$SITE" link set wan0 up
  ip -n "$SVC" addr add $NET.2/24 dev wan$i; ip -n "$SVC" link set wan$i up
  ip -n "$SITE" addr add 198.19.1.1/32 dev lo
  echo "   tenant $t: site $SITE at $NET.1 (inside 198.19.1.1), cloud side $CLOUD (198.19.2.1), gateway $NET.2"
  cat >> "$WORK/service.toml" <<EOF

[tenants.$t]
id = $i
initiate = ["site"]
[tenants.$t.dataplane]
tun = "clt-$t"
tun_netns = "$CLOUD"
tun_addresses = ["198.19.2.1/32"]
listen = ["$NET.2:4500"]
workers = 1
[tenants.$t.connections.site]
local_addrs = ["$NET.2"]
remote_addrs = ["$NET.1"]
proposals = ["aes256gcm16-prfsha256-ecp256"]
local = { auth = "psk", id = "gw.cloister.test", secret = "psk" }
remote = { auth = "psk", id = "$t.site.test" }
children.net = { local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.1.0/24"], esp_proposals = ["aes256gcm16"] }
[tenants.$t.secrets.psk]
EOF
  # The tenant's own machine: strongSwan and its PSK (never sent to the service in clear).
  D="$WORK/$SITE"; mkdir -p "$D/swanctl"
  PSK_VAR="PSK_$t"
  printf '%s\n' "${!PSK_VAR}" > "$D/psk.txt"
  cat > "$D/strongswan.conf" <<EOF
charon {
  load = random nonce openssl pem pkcs1 pkcs8 x509 pubkey curve25519 hmac kdf sha2 aes gcm chapoly kernel-libipsec kernel-netlink socket-default vici updown
  install_virtual_ip = no
  plugins { vici { socket = unix://$D/charon.vici } }
  filelog { main { path = $D/charon.log
    default = 1
  } }
}
EOF
  cat > "$D/swanctl/swanctl.conf" <<EOF
connections { gw { version = 2
  local_addrs = $NET.1
  remote_addrs = $NET.2
  proposals = aes256gcm16-prfsha256-ecp256
  local { auth = psk
    id = $t.site.test }
  remote { auth = psk
    id = gw.cloister.test }
  children { net { local_ts = 198.19.1.1/32
    remote_ts = 198.19.2.0/24
    esp_proposals = aes256gcm16 } } } }
secrets { ike-gw { id-a = $t.site.test
  id-b = gw.cloister.test
  secret = "${!PSK_VAR}" } }
EOF
  STRONGSWAN_CONF="$D/strongswan.conf" ip netns exec "$SITE" sh -c 'mount -t tmpfs cloister-run /run && exec /usr/lib/ipsec/charon' >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do [ -S "$D/charon.vici" ] && break; sleep 0.1; done
  in_ns "$SITE" swanctl --load-all --file "$D/swanctl/swanctl.conf" --uri "unix://$D/charon.vici" >/dev/null 2>&1
done

echo
echo "== cloister serve: embedded store, one enclave process per tenant"
# Started directly (not through a shell function), so $! is the service itself, whose
# memory the key-exposure check scans.
ip netns exec "$SVC" "$BIN" serve --config "$WORK/service.toml" > "$WORK/serve.log" 2>&1 &
SERVE=$!
PIDS+=("$SERVE")
for _ in $(seq 100); do grep -q "service: api" "$WORK/serve.log" && break; sleep 0.1; done
API=(--endpoint http://127.0.0.1:9440 --token-file "$WORK/api.token")
in_ns "$SVC" "$BIN" status "${API[@]}" | sed 's/^/   /'

echo
echo "== attested provisioning: each tenant checks its enclave, then seals its PSK to it"
PLATFORM=$(in_ns "$SVC" "$BIN" status "${API[@]}" | sed -n 's/^platform evidence key (software-rooted): //p')
i=0
for t in acme blue; do
  i=$((i + 1))
  M=$("$BIN" measure --tenant-id $i)
  echo "   tenant $t expects measurement ${M:0:32}... (cloister measure on the binary it trusts)"
  if in_ns "$SVC" "$BIN" tenant provision "${API[@]}" --tenant $t --tenant-id $i --secret psk \
      --measurement "$(printf '0%.0s' $(seq 96))" --platform-key "$PLATFORM" --psk-file "$WORK/$TAG-site$i/psk.txt" 2>"$WORK/refused.txt"; then
    echo "   ERROR: a wrong measurement was accepted"; exit 1
  fi
  echo "   with a wrong measurement: refused, nothing sent: $(head -c 150 "$WORK/refused.txt")"
  in_ns "$SVC" "$BIN" tenant provision "${API[@]}" --tenant $t --tenant-id $i --secret psk \
    --measurement "$M" --platform-key "$PLATFORM" --psk-file "$WORK/$TAG-site$i/psk.txt" | sed 's/^/   /'
done

echo
echo "== tunnels come up (the service initiates); ping and iperf3 through each"
i=0
for t in acme blue; do
  i=$((i + 1))
  ok=
  for _ in $(seq 30); do
    if in_ns $TAG-site$i ping -n -q -c 1 -W 1 -I 198.19.1.1 198.19.2.1 >/dev/null 2>&1; then ok=1; break; fi
  done
  [ -n "$ok" ] || { echo "   tenant $t: no tunnel"; tail -20 "$WORK/serve.log"; exit 1; }
  ip netns exec $TAG-cloud$i iperf3 -s -1 -B 198.19.2.1 >/dev/null 2>&1 &
  IP=$!
  PIDS+=("$IP")
  sleep 0.5
  MBIT=$(in_ns $TAG-site$i iperf3 -c 198.19.2.1 -B 198.19.1.1 -t 5 -J | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))')
  wait "$IP" 2>/dev/null || true
  echo "   tenant $t: iperf3 TCP site -> cloud through its tunnel: $MBIT Mbit/s"
done

echo
echo "== cloister tenants"
in_ns "$SVC" "$BIN" tenants "${API[@]}" | sed 's/^/   /'
echo
echo "== cloister tunnels"
in_ns "$SVC" "$BIN" tunnels "${API[@]}" | sed 's/^/   /'

echo
echo "== key-exposure check: the service's memory, store, logs and files hold no PSK"
python3 - "$SERVE" "$WORK" "$PSK_acme" "$PSK_blue" "${PIDS[0]}" <<'EOF'
import os, re, sys
serve, work, psks, charon = int(sys.argv[1]), sys.argv[2], [p.encode() for p in sys.argv[3:5]], int(sys.argv[5])
def scan_process(pid):
    found, scanned = set(), 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
            if not m or m.group(3)[0] != "r": continue
            a, b = int(m.group(1), 16), int(m.group(2), 16)
            try:
                mem.seek(a); data = mem.read(b - a)
            except OSError: continue
            scanned += len(data)
            for p in psks:
                if p in data: found.add(p)
    return found, scanned
def children(pid):
    return [int(c) for t in os.listdir(f"/proc/{pid}/task") for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
svc_found, n = scan_process(serve)
name = open(f"/proc/{serve}/comm").read().strip()
assert name == "cloister", f"pid {serve} is {name}, not the service"
print(f"   service process {serve} ({name}): {n >> 20} MiB scanned, PSKs found: {len(svc_found)}")
files_found = []
for root, _, names in os.walk(work):
    for f in names:
        path = os.path.join(root, f)
        if "cldemo" in path and "-site" in path: continue   # the tenants' own machines
        data = open(path, "rb").read()
        if any(p in data for p in psks): files_found.append(path)
print(f"   service files (store, config, token, platform keys, log): PSKs found in {len(files_found)}")
ctl_found, _ = scan_process(charon)
print(f"   positive control, tenant acme's strongSwan (pid {charon}): PSK found: {bool(ctl_found)}")
ok = not svc_found and not files_found and ctl_found
print("   verdict:", "PASS - no tenant PSK outside the tenants' enclaves" if ok else "FAIL")
sys.exit(0 if ok else 1)
EOF

echo
echo "== provisioning simulator: synthetic 24 h trace, 170 tunnels, Protego's parameters"
"$BIN" simulate gen-trace --seed 7 --out "$WORK/trace.csv" >/dev/null
"$BIN" simulate --trace "$WORK/trace.csv" --out "$ROOT/target/demo/plots" | tail -5
echo
echo "demo finished: namespaces, processes and scratch files removed"

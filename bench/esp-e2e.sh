#!/usr/bin/env bash
# End-to-end VPN throughput (issue 4): iperf3 host to host through a tunnel between two
# gateways, four namespaces
#
#   site-host ──lan── site-gw ══tunnel══ cloud-gw ──lan── cloud-host
#   198.18.10.N       .10.1 | 198.18.0.1    .0.2 | .20.1   198.18.20.N
#
# with every variant set up side by side (each on its own host address pair N, so one
# topology serves them all) and measured interleaved, round after round:
#   gateway        THE PRODUCT: two `cloister gateway` daemons, their default configuration
#                  (process enclave, 2 workers), an IKEv2 PSK tunnel the site initiates
#                  (aes256gcm16-prfsha256-x25519, child aes256gcm16), tun_mtu 1400, raw ESP
#                  (no NAT between them). Its own gateway namespaces (a raw ESP socket sees
#                  every ESP packet of its namespace), site 198.18.12.N, cloud 198.18.22.N
#   gateway-udp    the same with `encap = true` (ESP-in-UDP), 198.18.13.N / 198.18.23.N
#   cloister       reference, keys in the gateway process: `cloister dataplane` pair,
#                  AES-GCM-16-256 static SAs from wrapped keys,
#                  ESP-in-UDP (port 4600), in-process enclave (N=11)
#   cloister-proc  reference: the same with the enclave process (`--enclave process`, N=16)
#   strongswan     two charons with kernel-libipsec (userspace ESP, ESP-in-UDP), tunnel set
#                  up by IKEv2 between them, aes256gcm16 (N=20)
#   boringtun      boringtun-cli (crates.io), userspace WireGuard (N=13)
#   wireguard-go   wireguard-go (Debian), userspace WireGuard (N=14)
#   wireguard-go-upstream  wireguard-go built from its module (with TUN and UDP offloads; N=12)
#   plain          plain routing, no tunnel: the ceiling (N=15)
# Tests: TCP 1 stream, TCP 4 streams (receiver Mbit/s), UDP 64-byte and 1372-byte payloads
# sent as fast as iperf3 can (-b 0): packets/s received at the far end, and the loss. Every
# tunnel's MTU is 1400 (strongSwan's libipsec fixes its TUN device's at 1400; WireGuard's
# default would be 1420), so a 1372-byte datagram (a 1400-byte IP packet) crosses each whole.
#
# Then the product gateways at 80 % of their own median 64-byte rate (one run each, the
# loss it saw). Prints a table of medians and min-max over the rounds; the last lines are
#   esp e2e tcp1 ratio vs best peer=<r> udp64 ratio vs best peer=<r>        (static reference)
#   esp e2e product tcp1 ratio vs best peer=<r> udp64 ratio vs best peer=<r> raw/udp=<r>
# (a median against the best median of strongswan, boringtun and both wireguard-gos; raw/udp the
# lowest over the tests of gateway against gateway-udp).
#
# Usage (root): bench/esp-e2e.sh [ROUNDS] [SECONDS]   defaults 5 rounds of 5 s per test
#   E2E_VARIANTS="cloister strongswan ..."  a subset (cloister is needed for the ratios)
#   E2E_TESTS="udp64 ..."                    a subset of the tests (for profiling one of them)
#   E2E_COALESCE_US=N                        the Cloister gateways' `coalesce_us` (default: theirs)
#   E2E_SPREAD=1                             the Cloister gateways' `spread_inbound = true` (ESP-in-UDP
#                                            steered to workers by sequence number, not by peer)
#   E2E_KEEP=1                               keep the work directory (logs, iperf3 JSON)
#   E2E_CLOISTER=PATH                        use this `cloister` binary instead of building one
#   E2E_DEPS=0                               install nothing (a machine with no package access,
#                                            the tools already on PATH, boringtun-cli in .deps)
# Installs its own extra dependencies on first use (bench/lib/deps.sh: wireguard-go,
# wireguard-tools, boringtun-cli into .deps/cargo) and builds `cloister` (release). Cleans up
# every namespace and process it started, also on failure and Ctrl-C. See
# docs/bench-esp-e2e.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=${1:-5}
DURATION=${2:-5}
read -r -a VARIANTS <<<"${E2E_VARIANTS:-gateway gateway-udp cloister cloister-proc strongswan boringtun wireguard-go wireguard-go-upstream plain}"
read -r -a TESTS <<<"${E2E_TESTS:-tcp1 tcp4 udp64 udp1372}"

say() { printf '[esp-e2e] %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

[[ "$ROUNDS" =~ ^[0-9]+$ ]] && ((ROUNDS >= 1 && ROUNDS <= 50)) || die "ROUNDS must be 1..50"
[[ "$DURATION" =~ ^[0-9]+$ ]] && ((DURATION >= 1 && DURATION <= 60)) || die "SECONDS must be 1..60"
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
for v in "${VARIANTS[@]}"; do
  case $v in gateway|gateway-udp|cloister|cloister-proc|strongswan|boringtun|wireguard-go|wireguard-go-upstream|plain) ;; *) die "unknown variant $v" ;; esac
done

# shellcheck source=bench/lib/deps.sh
source "$ROOT/bench/lib/deps.sh"
[ "${E2E_DEPS:-1}" = 0 ] || e2e_deps
if [ -n "${E2E_CLOISTER:-}" ]; then
  CLOISTER=$E2E_CLOISTER
else
  say "building cloister (release)"
  cargo build --release -q -p cloister
  CLOISTER=$ROOT/target/release/cloister
fi
BORINGTUN=$ROOT/.deps/cargo/bin/boringtun-cli
WG_UPSTREAM=$ROOT/.deps/go/bin/wireguard
CHARON=/usr/lib/ipsec/charon
STATS=$ROOT/bench/lib/e2e_stats.py

# ---- bookkeeping and cleanup -------------------------------------------------------------
ID=$$
# Names as the test harness makes them (`clt<tag>-<pid>-<n>`): a later test sweeps what a
# killed run left behind, and only once this PID is gone.
SH=cltesh-$ID-0 SG=cltesg-$ID-1 CG=cltecg-$ID-2 CH=cltech-$ID-3
NAMESPACES=("$SH" "$SG" "$CG" "$CH")
WORK=$(mktemp -d /tmp/cloister-e2e.XXXXXX)
PIDS=()
WG_SOCKS=()
MADE_NS=()

# Whether PID is still our own, living child (not a zombie, not a reused number).
ours() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  set -- $stat
  [ "$1" != Z ] && [ "$2" = "$ID" ]
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    p=${PIDS[i]}
    ours "$p" && kill -TERM "$p" 2>/dev/null || true
  done
  for ((i = 0; i < 50; i++)); do
    local alive=0
    for p in "${PIDS[@]}"; do ours "$p" && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do ours "$p" && kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ns in "${MADE_NS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  for s in "${WG_SOCKS[@]}"; do rm -f "$s"; done
  if [ "${E2E_KEEP:-0}" = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# Starts "$@" in namespace $1 in the background, output to $2; records its PID.
start() {
  local ns=$1 log=$2
  shift 2
  ip netns exec "$ns" "$@" >"$log" 2>&1 &
  PIDS+=($!)
}

# Waits up to $2 seconds until the command "${@:3}" succeeds; $1 names what for the message.
wait_for() {
  local what=$1 limit=$2 i
  shift 2
  for ((i = 0; i < limit * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "timed out after ${limit}s waiting for $what"
}

hex() { head -c "$1" /dev/urandom | od -An -v -tx1 | tr -d ' \n'; }

# Where a test's packets were lost (counters are per namespace, read before and after each
# test): datagrams the namespace's UDP sockets dropped for a full receive buffer, and
# packets its devices dropped on transmit (a TUN queue its reader did not empty).
rcvbuf_errors() {
  ip netns exec "$1" awk '/^Udp:/ { if (!c) { for (i = 1; i <= NF; i++) if ($i == "RcvbufErrors") c = i } else { print $c; exit } }' /proc/net/snmp
}
# Packets raw IP sockets of the namespace dropped for a full receive buffer (/proc/net/raw's
# last column): where raw ESP is lost at the receiving gateway.
raw_drops() {
  ip netns exec "$1" awk 'NR > 1 { s += $NF } END { print s + 0 }' /proc/net/raw
}
tx_drops() {
  ip netns exec "$1" sed 's/^ *//; s/:/ /' /proc/net/dev | awk 'NR > 2 { s += $13 } END { print s + 0 }'
}

# ---- topology ----------------------------------------------------------------------------
declare -A HOST=([cloister]=11 [wireguard-go-upstream]=12 [boringtun]=13 [wireguard-go]=14 [plain]=15 [cloister-proc]=16 [strongswan]=20 [gateway]=17 [gateway-udp]=18)
# Each variant's site and cloud host addresses, and the gateway namespaces its packets cross
# (for the loss counters); the product variants have gateway namespaces of their own.
declare -A SRC DST GW_S GW_C
for v in "${VARIANTS[@]}"; do
  SRC[$v]=198.18.10.${HOST[$v]} DST[$v]=198.18.20.${HOST[$v]} GW_S[$v]=$SG GW_C[$v]=$CG
done
declare -A PNET=([gateway]=2 [gateway-udp]=3)

for ns in "${NAMESPACES[@]}"; do
  ip netns add "$ns"
  MADE_NS+=("$ns")
  ip -n "$ns" link set lo up
done
ip link add eth0 netns "$SH" type veth peer name lan0 netns "$SG"
ip link add wan0 netns "$SG" type veth peer name wan0 netns "$CG"
ip link add lan0 netns "$CG" type veth peer name eth0 netns "$CH"
ip -n "$SG" addr add 198.18.10.1/24 dev lan0
ip -n "$SG" addr add 198.18.0.1/24 dev wan0
ip -n "$CG" addr add 198.18.0.2/24 dev wan0
ip -n "$CG" addr add 198.18.20.1/24 dev lan0
for v in "${VARIANTS[@]}"; do
  ip -n "$SH" addr add "198.18.10.${HOST[$v]}/24" dev eth0
  ip -n "$CH" addr add "198.18.20.${HOST[$v]}/24" dev eth0
done
for ns_dev in "$SH eth0" "$SG lan0" "$SG wan0" "$CG wan0" "$CG lan0" "$CH eth0"; do
  set -- $ns_dev
  ip -n "$1" link set "$2" up
done
ip -n "$SH" route add default via 198.18.10.1
ip -n "$CH" route add default via 198.18.20.1
for ns in "$SG" "$CG"; do ip netns exec "$ns" sysctl -q -w net.ipv4.ip_forward=1; done
# The product variants: site-host - pgs = pgc - cloud-host, subnets 198.18.1K (site LAN),
# 198.18.K (WAN), 198.18.2K (cloud LAN) with K = PNET.
for v in "${VARIANTS[@]}"; do
  k=${PNET[$v]:-}
  [ -n "$k" ] || continue
  n=${HOST[$v]}
  ps=cltepgs$k-$ID-4 pc=cltepgc$k-$ID-5
  for ns in "$ps" "$pc"; do
    ip netns add "$ns"
    MADE_NS+=("$ns")
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -q -w net.ipv4.ip_forward=1
  done
  ip link add "p$k" netns "$SH" type veth peer name lan0 netns "$ps"
  ip link add wan0 netns "$ps" type veth peer name wan0 netns "$pc"
  ip link add lan0 netns "$pc" type veth peer name "p$k" netns "$CH"
  ip -n "$SH" addr add "198.18.1$k.$n/24" dev "p$k"
  ip -n "$ps" addr add "198.18.1$k.1/24" dev lan0
  ip -n "$ps" addr add "198.18.$k.1/24" dev wan0
  ip -n "$pc" addr add "198.18.$k.2/24" dev wan0
  ip -n "$pc" addr add "198.18.2$k.1/24" dev lan0
  ip -n "$CH" addr add "198.18.2$k.$n/24" dev "p$k"
  for ns_dev in "$SH p$k" "$ps lan0" "$ps wan0" "$pc wan0" "$pc lan0" "$CH p$k"; do
    set -- $ns_dev
    ip -n "$1" link set "$2" up
  done
  ip -n "$SH" route add "198.18.2$k.0/24" via "198.18.1$k.1"
  ip -n "$CH" route add "198.18.1$k.0/24" via "198.18.2$k.1"
  SRC[$v]=198.18.1$k.$n DST[$v]=198.18.2$k.$n GW_S[$v]=$ps GW_C[$v]=$pc
done

# ---- variants ----------------------------------------------------------------------------
PK=$WORK/provisioning.key
hex 32 >"$PK"
chmod 600 "$PK"

# cloister NAME PORT ENCLAVE SPI_BASE: a pair of `cloister dataplane` with wrapped keys.
setup_cloister() {
  local name=$1 port=$2 enclave=$3 base=$4 n=${HOST[$1]}
  local dir=$WORK/$name
  mkdir -p "$dir"
  local side
  # Fresh keys every start (static outbound SAs start at sequence number 1). Keys go to
  # `cloister secret wrap` on stdin and are dropped; the gateways' files hold only blobs.
  local k_up k_down
  k_up=$(hex 36)
  k_down=$(hex 36)
  for side in site cloud; do
    local me peer my_host peer_host out_spi in_spi k_out k_in ns
    if [ $side = site ]; then
      me=198.18.0.1 peer=198.18.0.2 my_host=198.18.10.$n peer_host=198.18.20.$n
      out_spi=$((base + 1)) in_spi=$((base + 2)) k_out=$k_up k_in=$k_down ns=$SG
    else
      me=198.18.0.2 peer=198.18.0.1 my_host=198.18.20.$n peer_host=198.18.10.$n
      out_spi=$((base + 2)) in_spi=$((base + 1)) k_out=$k_down k_in=$k_up ns=$CG
    fi
    local d spi k
    # Each side is a host of its own: its own copy of the tenant's key, and beside it its
    # own ledger (a ledger records the keys installed, one direction each).
    mkdir -p "$dir/$side"
    cp "$PK" "$dir/$side/provisioning.key"
    for d in out in; do
      if [ $d = out ]; then spi=$out_spi k=$k_out; else spi=$in_spi k=$k_in; fi
      printf '%s\n' "$k" | "$CLOISTER" secret wrap --kind esp --provisioning-key "$dir/$side/provisioning.key" --tenant 1 \
        --direction $d --spi "$spi" --encryption aes-gcm-16-256 --out "$dir/$side-$d.blob" >/dev/null
    done
    cat >"$dir/$side.toml" <<EOF
[dataplane]
tun = "cltun$n"
tun_mtu = 1400
routes = ["$peer_host/32"]
${E2E_COALESCE_US:+coalesce_us = $E2E_COALESCE_US}
$([ "${E2E_SPREAD:-0}" = 1 ] && echo "spread_inbound = true")

[[sa]]
name = "out"
direction = "out"
spi = $out_spi
local = "$me"
remote = "$peer"
encryption = "aes-gcm-16-256"
esn = false
udp_encap = { local_port = $port, remote_port = $port }
local_ts = ["$my_host/32"]
remote_ts = ["$peer_host/32"]
key = { wrapped = "$side-out.blob" }

[[sa]]
name = "in"
direction = "in"
spi = $in_spi
local = "$me"
remote = "$peer"
encryption = "aes-gcm-16-256"
esn = false
udp_encap = { local_port = $port, remote_port = $port }
local_ts = ["$my_host/32"]
remote_ts = ["$peer_host/32"]
key = { wrapped = "$side-in.blob" }

[[policy]]
local = "$my_host/32"
remote = "$peer_host/32"
action = "protect"
sa = "out"
EOF
    start "$ns" "$dir/$side.log" "$CLOISTER" dataplane --config "$dir/$side.toml" \
      --provisioning-key "$dir/$side/provisioning.key" --tenant 1 --enclave "$enclave"
  done
  k_up='' k_down=''
  wait_for "$name site-gw" 20 grep -q "offloads:" "$dir/site.log"
  wait_for "$name cloud-gw" 20 grep -q "offloads:" "$dir/cloud.log"
}

# gateway NAME ENCAP: two `cloister gateway` daemons in the variant's namespaces, a PSK
# tunnel the site initiates; everything else their defaults.
setup_gateway() {
  local name=$1 encap=$2 k=${PNET[$1]}
  local dir=$WORK/$name side psk
  psk=$(hex 32)
  mkdir -p "$dir"
  for side in site cloud; do
    local me peer lan far id peer_id ns
    if [ $side = site ]; then
      me=198.18.$k.1 peer=198.18.$k.2 lan=198.18.1$k.0/24 far=198.18.2$k.0/24 ns=${GW_S[$name]}
      id=site.cloister.test peer_id=cloud.cloister.test
    else
      me=198.18.$k.2 peer=198.18.$k.1 lan=198.18.2$k.0/24 far=198.18.1$k.0/24 ns=${GW_C[$name]}
      id=cloud.cloister.test peer_id=site.cloister.test
    fi
    mkdir -p "$dir/$side"
    cp "$PK" "$dir/$side/provisioning.key"
    printf '%s\n' "$psk" | "$CLOISTER" secret wrap --kind psk --provisioning-key "$dir/$side/provisioning.key" \
      --tenant 1 --out "$dir/$side/psk.blob" >/dev/null
    cat >"$dir/$side/gateway.toml" <<EOF
[gateway]
tenant = 1
enclave = "process"
provisioning_key = "provisioning.key"
control_socket = "gw.sock"

[dataplane]
tun = "clgw$k"
tun_mtu = 1400
listen = ["$me:4500"]

[connections.peer]
local_addrs = ["$me"]
remote_addrs = ["$peer"]
proposals = ["aes256gcm16-prfsha256-x25519"]
encap = $encap
local = { auth = "psk", id = "$id", secret = "psk" }
remote = { auth = "psk", id = "$peer_id" }
children.net = { local_ts = ["$lan"], remote_ts = ["$far"], esp_proposals = ["aes256gcm16"] }

[secrets.psk]
file = "psk.blob"
EOF
    start "$ns" "$dir/$side.log" "$CLOISTER" gateway --config "$dir/$side/gateway.toml"
  done
  psk=''
  wait_for "$name site-gw" 30 grep -q "^gateway: tenant" "$dir/site.log"
  wait_for "$name cloud-gw" 30 grep -q "^gateway: tenant" "$dir/cloud.log"
  ip netns exec "${GW_S[$name]}" "$CLOISTER" sa --socket "$dir/site/gw.sock" initiate peer >/dev/null
  wait_for "$name child SA" 30 grep -q "child: net installed" "$dir/site.log"
  wait_for "$name child SA (cloud)" 30 grep -q "child: net installed" "$dir/cloud.log"
}

charon_conf() {
  cat <<EOF
charon {
  load = random nonce openssl pem pkcs1 pkcs8 x509 pubkey curve25519 hmac kdf sha2 aes gcm chapoly kernel-libipsec kernel-netlink socket-default vici updown
  install_virtual_ip = no
  plugins {
    vici { socket = unix://$1/charon.vici }
  }
  filelog {
    main { path = $1/charon.log
      default = 1
      ike = 1
    }
  }
}
EOF
}

swanctl_conf() { # me peer my_host peer_host my_id peer_id psk
  cat <<EOF
connections {
  e2e {
    version = 2
    local_addrs = $1
    remote_addrs = $2
    proposals = aes256gcm16-prfsha256-x25519
    # No IKE traffic during the measurements (MOBIKE would send an address update whenever
    # an interface appears, such as another variant's TUN device).
    mobike = no
    local { auth = psk
            id = $5 }
    remote { auth = psk
             id = $6 }
    children {
      net {
        local_ts = $3/31
        remote_ts = $4/31
        esp_proposals = aes256gcm16
        start_action = none
      }
    }
  }
}
secrets {
  ike-e2e { id-a = $5
            id-b = $6
            secret = "$7" }
}
EOF
}

# kernel-libipsec routes into its TUN device (table 220) only with a local address inside
# the local traffic selector: the selectors are the /31s of the host (.20) and the gateway,
# which gets .21 on its loopback.
setup_strongswan() {
  local n=${HOST[strongswan]} psk side
  # A private copy of charon: Debian's /etc/init.d/ipsec stop (which scripts/setup.sh runs,
  # as may a test started meanwhile) kills every process whose executable is
  # /usr/lib/ipsec/charon, by path and by `killall -9`, namespaced ones included.
  local charon=$WORK/charon
  cp "$CHARON" "$charon"
  ip -n "$SG" addr add "198.18.10.$((n + 1))/32" dev lo
  ip -n "$CG" addr add "198.18.20.$((n + 1))/32" dev lo
  psk=$(hex 24)
  for side in site cloud; do
    local dir=$WORK/strongswan-$side ns me peer my_host peer_host my_id peer_id
    mkdir -p "$dir"
    if [ $side = site ]; then
      ns=$SG me=198.18.0.1 peer=198.18.0.2 my_host=198.18.10.$n peer_host=198.18.20.$n
      my_id=site.e2e.test peer_id=cloud.e2e.test
    else
      ns=$CG me=198.18.0.2 peer=198.18.0.1 my_host=198.18.20.$n peer_host=198.18.10.$n
      my_id=cloud.e2e.test peer_id=site.e2e.test
    fi
    charon_conf "$dir" >"$dir/strongswan.conf"
    swanctl_conf "$me" "$peer" "$my_host" "$peer_host" "$my_id" "$peer_id" "$psk" >"$dir/swanctl.conf"
    # charon's PID file path is fixed: a private /run in its own mount namespace.
    start "$ns" "$dir/stdout.log" env STRONGSWAN_CONF="$dir/strongswan.conf" \
      sh -c "mount -t tmpfs cloister-run /run && exec $charon"
    wait_for "charon's vici socket ($side)" 20 test -S "$dir/charon.vici"
    ip netns exec "$ns" timeout 30 swanctl --load-all --file "$dir/swanctl.conf" --uri "unix://$dir/charon.vici" \
      >"$dir/load.log" 2>&1 || { cat "$dir/load.log" >&2; die "swanctl --load-all failed ($side)"; }
  done
  ip netns exec "$SG" timeout 40 swanctl --initiate --child net --timeout 30 \
    --uri "unix://$WORK/strongswan-site/charon.vici" >"$WORK/strongswan-initiate.log" 2>&1 \
    || { cat "$WORK/strongswan-initiate.log" >&2; die "strongSwan could not set up the tunnel"; }
  wait_for "charon's TUN device (site)" 10 ip -n "$SG" link show ipsec0
  wait_for "charon's TUN device (cloud)" 10 ip -n "$CG" link show ipsec0
  # libipsec reads its TUN device with buffers of the MTU it set (1400): leave it.
  for ns in "$SG" "$CG"; do
    ip -n "$ns" -o link show ipsec0 | grep -q ' mtu 1400 ' || die "libipsec's TUN device is not at MTU 1400"
  done
}

# wireguard KIND PORT: a pair of userspace WireGuard daemons (boringtun, wireguard-go or
# wireguard-go-upstream).
setup_wireguard() {
  local kind=$1 port=$2 n=${HOST[$1]} tag
  case $kind in boringtun) tag=bt ;; wireguard-go) tag=wg ;; *) tag=wu ;; esac
  local dir=$WORK/$kind side
  mkdir -p "$dir"
  for side in site cloud; do
    (umask 077 && wg genkey >"$dir/$side.key")
    wg pubkey <"$dir/$side.key" >"$dir/$side.pub"
  done
  for side in site cloud; do
    local ns ifname peer peer_host other
    if [ $side = site ]; then ns=$SG peer=198.18.0.2 peer_host=198.18.20.$n other=cloud
    else ns=$CG peer=198.18.0.1 peer_host=198.18.10.$n other=site; fi
    # The UAPI socket lives in /var/run/wireguard, shared by all namespaces: unique names.
    ifname=$tag$ID${side:0:1}
    ifname=${ifname:0:15}
    WG_SOCKS+=("/var/run/wireguard/$ifname.sock")
    if [ "$kind" = boringtun ]; then
      start "$ns" "$dir/$side.log" env WG_SUDO=1 "$BORINGTUN" --foreground --disable-drop-privileges \
        --log "$dir/$side.boringtun.log" "$ifname"
    elif [ "$kind" = wireguard-go ]; then
      start "$ns" "$dir/$side.log" env WG_PROCESS_FOREGROUND=1 wireguard-go -f "$ifname"
    else
      start "$ns" "$dir/$side.log" env WG_PROCESS_FOREGROUND=1 "$WG_UPSTREAM" -f "$ifname"
    fi
    wait_for "$kind UAPI socket ($side)" 20 test -S "/var/run/wireguard/$ifname.sock"
    ip netns exec "$ns" wg set "$ifname" private-key "$dir/$side.key" listen-port "$port" \
      peer "$(cat "$dir/$other.pub")" allowed-ips "$peer_host/32" endpoint "$peer:$port"
    ip -n "$ns" link set "$ifname" mtu 1400 up
    ip -n "$ns" route add "$peer_host/32" dev "$ifname"
  done
}

setup_plain() {
  local n=${HOST[plain]}
  ip -n "$SG" route add "198.18.20.$n/32" via 198.18.0.2
  ip -n "$CG" route add "198.18.10.$n/32" via 198.18.0.1
}

for v in "${VARIANTS[@]}"; do
  say "setting up $v"
  case $v in
    gateway) setup_gateway gateway false ;;
    gateway-udp) setup_gateway gateway-udp true ;;
    cloister) setup_cloister cloister 4600 inline 0x1000 ;;
    cloister-proc) setup_cloister cloister-proc 4601 process 0x2000 ;;
    strongswan) setup_strongswan ;;
    boringtun) setup_wireguard boringtun 51820 ;;
    wireguard-go) setup_wireguard wireguard-go 51821 ;;
    wireguard-go-upstream) setup_wireguard wireguard-go-upstream 51822 ;;
    plain) setup_plain ;;
  esac
done

# Every path must carry pings before anything is measured (WireGuard handshakes on the first).
for v in "${VARIANTS[@]}"; do
  n=${HOST[$v]}
  ip netns exec "$SH" timeout 15 ping -n -q -c 3 -i 0.2 -w 10 -I "${SRC[$v]}" "${DST[$v]}" \
    >"$WORK/ping-$v.log" 2>&1 || { cat "$WORK/ping-$v.log" >&2; die "$v: no ping through the tunnel"; }
  start "$CH" "$WORK/iperf3-server-$v.log" iperf3 -s -B "${DST[$v]}" -p $((5200 + n))
done
for v in "${VARIANTS[@]}"; do
  n=${HOST[$v]}
  wait_for "iperf3 server ($v)" 10 sh -c "ip netns exec $CH ss -Hltn 'sport = :$((5200 + n))' | grep -q ."
done

# ---- measuring ---------------------------------------------------------------------------
echo "esp e2e: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), kernel $(uname -r)"
echo "esp e2e: $ROUNDS rounds x ${#VARIANTS[@]} variants x ${#TESTS[@]} tests, ${DURATION}s each, interleaved"
echo "versions: $(iperf3 --version | head -1 | cut -d' ' -f1-2), strongSwan $(dpkg-query -W -f='${Version}' strongswan-charon), wireguard-go $(wireguard-go --version | head -1 | awk '{print $2}'), boringtun-cli $("$BORINGTUN" --version | awk '{print $2}')$([ -x "$WG_UPSTREAM" ] && echo ", upstream wireguard-go $("$WG_UPSTREAM" --version | head -1 | awk '{print $2}')")"
for v in gateway gateway-udp cloister cloister-proc; do
  [ -f "$WORK/$v/site.log" ] && echo "$v site-gw: $(grep -m1 'offloads:' "$WORK/$v/site.log")"
done
RESULTS=$WORK/results
LOSSES=$WORK/losses
: >"$RESULTS"
: >"$LOSSES"
nv=${#VARIANTS[@]}
for ((r = 1; r <= ROUNDS; r++)); do
  for ((j = 0; j < nv; j++)); do
    v=${VARIANTS[(j + r - 1) % nv]}   # each round starts with another variant
    n=${HOST[$v]}
    for t in "${TESTS[@]}"; do
      case $t in
        tcp1) args=() ;;
        tcp4) args=(-P 4) ;;
        udp64) args=(-u -b 0 -l 64) ;;
        udp1372) args=(-u -b 0 -l 1372) ;;
      esac
      out=$WORK/r$r-$v-$t.json
      before="$(tx_drops "${GW_S[$v]}") $(rcvbuf_errors "${GW_C[$v]}") $(rcvbuf_errors "$CH") $(raw_drops "${GW_C[$v]}")"
      ip netns exec "$SH" timeout $((DURATION + 20)) iperf3 -c "${DST[$v]}" -B "${SRC[$v]}" \
        -p $((5200 + n)) -t "$DURATION" --connect-timeout 3000 -J "${args[@]}" >"$out" 2>"$out.err" || true
      read -r val loss < <(python3 "$STATS" extract "$t" "$out")
      echo "$r $v $t $val $loss" >>"$RESULTS"
      read -r sg0 cg0 ch0 rw0 <<<"$before"
      echo "$r $v $t $(($(tx_drops "${GW_S[$v]}") - sg0)) $(($(rcvbuf_errors "${GW_C[$v]}") - cg0)) $(($(rcvbuf_errors "$CH") - ch0)) $(($(raw_drops "${GW_C[$v]}") - rw0))" >>"$LOSSES"
      printf '[esp-e2e] round %d %-21s %-8s %s\n' "$r" "$v" "$t" "$val" >&2
      sleep 0.3
    done
  done
done

# The product at 80 % of its own median 64-byte rate of this run: what a sender that the
# receiver keeps up with loses (goal: under 0.1 %), and where.
PACED=()
if [[ " ${TESTS[*]} " == *" udp64 "* ]]; then
  for v in gateway gateway-udp; do
    [[ " ${VARIANTS[*]} " == *" $v "* ]] || continue
    pps=$(awk -v v="$v" '$2 == v && $3 == "udp64" && $4 != "nan" { print $4 }' "$RESULTS" | sort -g \
      | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }')
    [ -n "$pps" ] || continue
    bits=$(python3 -c "print(int(0.8 * float('$pps') * 64 * 8))")
    n=${HOST[$v]}
    out=$WORK/paced-$v.json
    rw0=$(raw_drops "${GW_C[$v]}") cg0=$(rcvbuf_errors "${GW_C[$v]}")
    ip netns exec "$SH" timeout $((DURATION + 20)) iperf3 -c "${DST[$v]}" -B "${SRC[$v]}" \
      -p $((5200 + n)) -t "$DURATION" --connect-timeout 3000 -J -u -l 64 -b "$bits" >"$out" 2>"$out.err" || true
    read -r val loss < <(python3 "$STATS" extract udp64 "$out")
    PACED+=("paced udp64 $v: offered 80% of ${pps%.*} pkt/s, received ${val%.*} pkt/s, loss $(printf "%.2f" "$loss")% (cloud-gw raw drops $(($(raw_drops "${GW_C[$v]}") - rw0)), RcvbufErrors $(($(rcvbuf_errors "${GW_C[$v]}") - cg0)))")
    say "paced udp64 $v: ${val%.*} pkt/s, loss $loss%"
  done
fi

# The product gateways' drop counters by reason (IKE and ESP), from their control sockets.
for v in gateway gateway-udp; do
  [ -f "$WORK/$v/site.log" ] || continue
  for side in site cloud; do
    ns=${GW_S[$v]}
    [ $side = cloud ] && ns=${GW_C[$v]}
    echo "$v $side-gw counters: $(ip netns exec "$ns" "$CLOISTER" sa --socket "$WORK/$v/$side/gw.sock" counters 2>&1 | tr '\n' ' ' | cut -c1-600)"
  done
done
# Cloister's own counters (SIGTERM prints them): drops by reason, offload use.
for v in cloister cloister-proc; do
  [ -f "$WORK/$v/site.log" ] || continue
  for side in site cloud; do
    for p in "${PIDS[@]}"; do
      if ours "$p" && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "--config $WORK/$v/$side.toml"; then
        kill -TERM "$p"
        for ((i = 0; i < 50; i++)); do ours "$p" || break; sleep 0.1; done
      fi
    done
    echo "$v $side-gw $(grep -m1 '^total:' "$WORK/$v/$side.log" || echo 'total: (no counters)')"
  done
done
for line in "${PACED[@]}"; do echo "$line"; done
python3 "$STATS" losses "$LOSSES" "${VARIANTS[@]}"
python3 "$STATS" summary "$RESULTS" "${VARIANTS[@]}"

#!/usr/bin/env bash
# IKE tunnel setup benchmark (issue 5): Cloister's gateway against strongSwan's charon as
# IKEv2 responders, same machine, same proposals (aes256-sha256-modp3072 with ESP
# aes256-sha256, aes256gcm16-prfsha256-x25519 with ESP aes256gcm16), PSK, in one run:
#   - single-tunnel setup time and setup rate with strongSwan's load-tester plugin as the
#     initiator (built from Debian's strongSwan source by bench/ike/build-load-tester.sh,
#     cached in .deps/), a burst of N tunnels through its control socket;
#   - the same with Cloister's own initiator, `cloister ike-load` (window of W tunnels under
#     way), since the strongSwan initiator may itself be the ceiling;
#   - HOLD tunnels (x25519) held at once: memory per IKE SA (with its child SA), trusted =
#     the enclave process's RSS, untrusted = the gateway process's RSS; charon's RSS.
# Responders run in network namespace clt-ike<pid>-r, initiators in clt-ike<pid>-i (veth,
# 198.18.0.1 -> 198.18.0.2, inner 198.19.0.0/16); everything is removed on exit.
# Rounds alternate which responder goes first; figures are medians [min-max] over ROUNDS.
#   - the post-quantum hybrid's cost (RFC 9370: x25519 then ML-KEM-768 in IKE_INTERMEDIATE):
#     Cloister's responder with aes256gcm16-prfsha256-x25519-ke1_mlkem768 against the same
#     responder with x25519 alone, both driven by `cloister ike-load` (strongSwan 5.9 does no
#     additional key exchange), alternating order per round.
# Method and figures: docs/bench-ike.md. Needs root. Last lines:
#   ike setup rate ratio vs strongswan modp3072=<r> x25519=<r>
#   ike hybrid setup rate ratio vs x25519 (cloister, ike-load)=<r>
# Knobs (environment): ROUNDS (3), SETUPS (10 single setups per measurement), RATE_MODP (150),
# RATE_X25519 (400) tunnels per rate burst, LT_DELAY_MS (0: the plugin's delay between
# initiations), WINDOW (32, ike-load), HOLD (1000; 0 skips), TIMEOUT (60 s per measurement),
# INLINE (1: also the gateway with enclave = "inline", the reference for the enclave's cost),
# SUITE (modp3072 or x25519: that suite only; hybrid: only the hybrid against x25519, no
# strongSwan), HYBRID (1; 0 skips the hybrid comparison), IKE_LOAD (1; 0: the load-tester only), KEEP
# (0; 1: keep the scratch directory with each burst's logs and counters, initiator at ike=1).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ "$(id -u)" -eq 0 ] || { echo "bench/ike-setup.sh needs root (network namespaces)" >&2; exit 1; }
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"

ROUNDS=${ROUNDS:-3}
SETUPS=${SETUPS:-10}
RATE_MODP=${RATE_MODP:-150}
RATE_X25519=${RATE_X25519:-400}
LT_DELAY_MS=${LT_DELAY_MS:-0}
WINDOW=${WINDOW:-32}
HOLD=${HOLD:-1000}
TIMEOUT=${TIMEOUT:-60}
INLINE=${INLINE:-1}
SUITES=(aes256-sha256-modp3072 aes256gcm16-prfsha256-x25519)
HYBRID=${HYBRID:-1}
HYBRID_SUITE=aes256gcm16-prfsha256-x25519-ke1_mlkem768
# SUITE=modp3072 or SUITE=x25519 measures that suite only; SUITE=hybrid the hybrid only.
case ${SUITE:-} in
  "") ;;
  modp3072) SUITES=(aes256-sha256-modp3072) ;;
  x25519) SUITES=(aes256gcm16-prfsha256-x25519) ;;
  hybrid) SUITES=(); HYBRID=1; HOLD=0; INLINE=0 ;;
  *) echo "SUITE must be modp3072, x25519 or hybrid" >&2; exit 1 ;;
esac
# KEEP=1 keeps the scratch directory (configurations, logs) and prints its path.
KEEP=${KEEP:-0}
# IKE_LOAD=0 skips the `cloister ike-load` measurements (load-tester only).
IKE_LOAD=${IKE_LOAD:-1}
PSK='Vb4r-Qe8t-Mn2z-Kx7w-Hj5d-Lp3s-Fg9c-Ty6u'
I_ADDR=198.18.0.1
R_ADDR=198.18.0.2
GW_ID=gw.cloister.test
CHARON=/usr/lib/ipsec/charon

esp_for() { case $1 in *modp3072) echo aes256-sha256 ;; *) echo aes256gcm16 ;; esac; }
short() { case $1 in *modp3072) echo modp3072 ;; *ke1_mlkem768) echo hybrid ;; *) echo x25519 ;; esac; }
rate_n() { case $1 in *modp3072) echo "$RATE_MODP" ;; *) echo "$RATE_X25519" ;; esac; }

# ---- dependencies: strongSwan (scripts/setup.sh), the plugin, Cloister ------------------
if [ ! -x "$CHARON" ] || ! command -v swanctl >/dev/null ||
  [ ! -f /usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so ]; then
  ./scripts/setup.sh
fi
# The load-tester only where strongSwan's initiator runs (not for SUITE=hybrid alone).
if ((${#SUITES[@]})) || ((HOLD > 0)); then
  lt_dir=$(bench/ike/build-load-tester.sh | tail -1)
else
  lt_dir=/nonexistent
fi
LT_SO=$lt_dir/libstrongswan-load-tester.so
LDT=$lt_dir/ldt-client
cargo build --release --quiet -p cloister --bin cloister
target=${CARGO_TARGET_DIR:-$root/target}

# ---- scratch, namespaces, processes; all removed on exit --------------------------------
tmp=$(mktemp -d /tmp/cloister-ike-bench.XXXXXX)
chmod 755 "$tmp"
# Our own copy: other builds may replace target/release/cloister while this runs.
cp "$target/release/cloister" "$tmp/cloister"
CLOISTER=$tmp/cloister
NS_I=clt-ike$$-i
NS_R=clt-ike$$-r
started=()   # PIDs of processes this script started (ended by PID only)

alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# TERM, up to 10 s, then KILL; reaps it when it is our child.
stop_pid() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local rc=$? pid
  set +e
  for pid in "${started[@]}"; do stop_pid "$pid"; done
  ip netns del "$NS_I" 2>/dev/null
  ip netns del "$NS_R" 2>/dev/null
  if ((KEEP)); then echo "scratch kept in $tmp" >&2; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS_I"
ip netns add "$NS_R"
ip link add wan0 netns "$NS_I" type veth peer name wan0 netns "$NS_R"
ip -n "$NS_I" addr add "$I_ADDR/24" dev wan0
ip -n "$NS_R" addr add "$R_ADDR/24" dev wan0
# charon with kernel-libipsec routes its child SAs from an address inside its local TS.
ip -n "$NS_R" addr add 198.19.2.2/32 dev lo
for ns in "$NS_I" "$NS_R"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" link set wan0 up
done

# wait_until DESCRIPTION SECONDS COMMAND...: polls every 50 ms.
wait_until() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 20; i++)); do "$@" && return 0; sleep 0.05; done
  echo "timed out after ${secs}s waiting for $what" >&2
  return 1
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors ... (/proc/net/snmp)
udp_rcvbuf_errors() { ip netns exec "$1" awk '/^Udp:/ {n++; if (n == 2) print $6}' /proc/net/snmp; }
udp_in_errors() { ip netns exec "$1" awk '/^Udp:/ {n++; if (n == 2) print $4}' /proc/net/snmp; }
kv() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -1; }

# ---- Cloister's gateway as responder ---------------------------------------------------
cl_dir=$tmp/cloister-gw
mkdir -p "$cl_dir"
(umask 077 && printf '%s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" >"$cl_dir/provisioning.key")
printf '%s\n' "$PSK" | "$CLOISTER" secret wrap --provisioning-key "$cl_dir/provisioning.key" --tenant 1 \
  --kind psk --out "$cl_dir/psk.blob" >/dev/null
(umask 077 && printf '%s\n' "$PSK" >"$tmp/psk.txt")

R_PID=""
ENCLAVE_PID=""
R_LOG=""
start_cloister() { # SUITE BACKEND
  local suite=$1 backend=${2:-process} esp
  esp=$(esp_for "$suite")
  # Many peers from one address, any identity; cookies only far above the burst size.
  cat >"$cl_dir/gateway.toml" <<EOF
[gateway]
tenant = 1
enclave = "$backend"
provisioning_key = "provisioning.key"
control_socket = "gw.sock"
cookie_threshold = 100000

[dataplane]
tun = "clgw0"
tun_addresses = ["198.19.2.1/32"]
listen = ["$R_ADDR:4500"]
workers = 1

[connections.lt]
local_addrs = ["$R_ADDR"]
remote_addrs = ["%any"]
proposals = ["$suite"]
# Every load-generated tunnel uses one identity: INITIAL_CONTACT must not replace the others
# (the strongSwan responder below is configured the same way).
unique = "never"
local = { auth = "psk", id = "$GW_ID", secret = "psk" }
remote = { auth = "psk", id = "%any" }
children.net = { local_ts = ["198.19.2.0/24"], remote_ts = ["198.19.0.0/16"], esp_proposals = ["$esp"] }

[secrets.psk]
file = "psk.blob"
EOF
  R_LOG=$cl_dir/gateway.log
  ip netns exec "$NS_R" "$CLOISTER" gateway --config "$cl_dir/gateway.toml" >"$R_LOG" 2>&1 &
  R_PID=$!
  started+=("$R_PID")
  wait_until "the gateway" 30 grep -q '^gateway: tenant' "$R_LOG" || { cat "$R_LOG" >&2; return 1; }
  ENCLAVE_PID=$(sed -n 's/.*enclave process pid \([0-9]*\).*/\1/p' "$R_LOG" | head -1)
}
stop_cloister() {
  stop_pid "$R_PID"
  # The enclave process ends with its gateway; if not, by its PID.
  [ -n "$ENCLAVE_PID" ] && wait_until "the enclave process to end" 5 bash -c "! [ -d /proc/$ENCLAVE_PID ]" ||
    stop_pid "$ENCLAVE_PID"
  R_PID=""
  ENCLAVE_PID=""
}
cl_children() { grep -c '^child: net installed' "$R_LOG" || true; }
cl_cookies() {
  timeout 15 ip netns exec "$NS_R" "$CLOISTER" sa --socket "$cl_dir/gw.sock" counters 2>/dev/null |
    sed -n 's/.*refusals: \[[0-9]*, [0-9]*, \([0-9]*\).*/\1/p' | head -1
}

# ---- strongSwan's charon as responder (kernel-libipsec: userspace ESP, as Cloister) ------
sw_dir=$tmp/strongswan-r
mkdir -p "$sw_dir"
start_strongswan() { # SUITE
  local suite=$1 esp
  esp=$(esp_for "$suite")
  cat >"$sw_dir/strongswan.conf" <<EOF
charon {
  load = random nonce openssl pem pkcs1 pkcs8 x509 pubkey curve25519 hmac kdf sha2 aes gcm kernel-libipsec kernel-netlink socket-default vici
  install_virtual_ip = no
  # Many half-open SAs from one address: no cookies, no per-IP blocking.
  dos_protection = no
  cookie_threshold = 100000
  block_threshold = 100000
  plugins {
    vici { socket = unix://$sw_dir/charon.vici }
  }
  filelog {
    main { path = $sw_dir/charon.log
      time_format = %s
      default = 0
    }
  }
}
EOF
  cat >"$sw_dir/swanctl.conf" <<EOF
connections {
  lt {
    version = 2
    local_addrs = $R_ADDR
    proposals = $suite
    unique = never
    local { auth = psk
            id = $GW_ID }
    remote { auth = psk }
    children {
      net {
        local_ts = 198.19.2.0/24
        remote_ts = 198.19.0.0/16
        esp_proposals = $esp
      }
    }
  }
}
secrets {
  ike-lt { secret = "$PSK" }
}
EOF
  rm -f "$sw_dir/charon.vici"
  R_LOG=$sw_dir/charon.log
  : >"$R_LOG"
  # Its own /run: charon's PID file path is fixed.
  STRONGSWAN_CONF=$sw_dir/strongswan.conf ip netns exec "$NS_R" \
    sh -c "mount -t tmpfs cltrun /run && exec $CHARON" >"$sw_dir/charon.out" 2>&1 &
  R_PID=$!
  started+=("$R_PID")
  wait_until "charon's vici socket" 20 test -S "$sw_dir/charon.vici" || { cat "$sw_dir/charon.out" >&2; return 1; }
  timeout 30 swanctl --load-all --file "$sw_dir/swanctl.conf" --uri "unix://$sw_dir/charon.vici" >"$sw_dir/swanctl.out" 2>&1 ||
    { cat "$sw_dir/swanctl.out" >&2; return 1; }
}
stop_strongswan() {
  stop_pid "$R_PID"
  R_PID=""
}
sw_children() {
  timeout 30 swanctl --list-sas --uri "unix://$sw_dir/charon.vici" 2>/dev/null | grep -c 'INSTALLED' || true
}

# Responders: cloister (enclave process), cloister-inline (keys in the gateway process: the
# reference for what the enclave boundary costs), strongswan.
start_responder() {
  case $1 in
    cloister) start_cloister "$2" process ;;
    cloister-inline) start_cloister "$2" inline ;;
    *) start_strongswan "$2" ;;
  esac
}
stop_responder() { if [ "$1" = strongswan ]; then stop_strongswan; else stop_cloister; fi; }
children_of() { if [ "$1" = strongswan ]; then sw_children; else cl_children; fi; }

# ---- strongSwan's load-tester as initiator ---------------------------------------------
lt_conf_dir=$tmp/load-tester
mkdir -p "$lt_conf_dir"
I_PID=""
start_load_tester() { # SUITE
  local suite=$1 esp
  esp=$(esp_for "$suite")
  cat >"$lt_conf_dir/strongswan.conf" <<EOF
charon {
  load = random nonce openssl pem pkcs1 pkcs8 x509 pubkey curve25519 hmac kdf sha2 aes gcm load-tester kernel-netlink socket-default
  reuse_ikesa = no
  dos_protection = no
  install_routes = no
  install_virtual_ip = no
  plugins {
    load-tester {
      enable = yes
      # Initiations come through the control socket only.
      initiators = 0
      # No kernel SAs: this machine's kernel has no ESP, and the responder is measured.
      fake_kernel = yes
      initiator = $I_ADDR
      responder = $R_ADDR
      proposal = $suite
      esp = $esp
      initiator_auth = psk
      responder_auth = psk
      responder_id = $GW_ID
      preshared_key = $PSK
      initiator_tsi = 198.19.1.0/24
      initiator_tsr = 198.19.2.0/24
      child_rekey = 3600
      socket = unix://$lt_conf_dir/charon.ldt
    }
  }
  filelog {
    main { path = $lt_conf_dir/charon.log
      time_format = %s
      default = 0
      # KEEP=1: which requests are retransmitted (message ID 0: IKE_SA_INIT, 1: IKE_AUTH).
      ike = $((KEEP ? 1 : 0))
    }
  }
}
EOF
  rm -f "$lt_conf_dir/charon.ldt"
  # The plugin is not in charon's plugin directory: LD_PRELOAD makes its constructor
  # visible, and plugin_loader finds it there first.
  STRONGSWAN_CONF=$lt_conf_dir/strongswan.conf ip netns exec "$NS_I" \
    sh -c "mount -t tmpfs cltrun /run && exec env LD_PRELOAD=$LT_SO $CHARON" >"$lt_conf_dir/charon.out" 2>&1 &
  I_PID=$!
  started+=("$I_PID")
  wait_until "the load-tester's socket" 20 test -S "$lt_conf_dir/charon.ldt" ||
    { cat "$lt_conf_dir/charon.out" "$lt_conf_dir/charon.log" >&2; return 1; }
}
stop_load_tester() {
  stop_pid "$I_PID"
  I_PID=""
}
ldt() { "$LDT" "$lt_conf_dir/charon.ldt" "$@" "$TIMEOUT" || true; }

# ---- results: one file per series, one number per line ---------------------------------
res=$tmp/results
mkdir -p "$res"
add() { echo "$2" >>"$res/$1"; }
# stat SERIES: "median [min-max]" with 1 decimal ("-" when empty)
stat() {
  [ -s "$res/$1" ] || { echo "-"; return; }
  sort -g "$res/$1" | awk '{v[NR] = $1} END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.1f [%.1f-%.1f]", m, v[1], v[NR]}'
}
median() {
  [ -s "$res/$1" ] || { echo 0; return; }
  sort -g "$res/$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
ratio() { awk -v a="$(median "$1")" -v b="$(median "$2")" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }
# p50 VALUES...: the median of its arguments (lower middle), "-" when none.
p50() {
  [ $# -gt 0 ] || { echo "-"; return; }
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}
notes=$tmp/notes
: >"$notes"
note() { echo "$*" | tee -a "$notes"; }

charon_version=$(dpkg-query -W -f='${Version}' strongswan-charon)
echo "== ike-setup: strongSwan $charon_version (load-tester plugin from $(cat "$lt_dir/SOURCE" 2>/dev/null || echo "-: not used")),"
echo "   cloister release build, $(nproc) cores, $(uname -r)," \
  "ROUNDS=$ROUNDS SETUPS=$SETUPS RATE_MODP=$RATE_MODP RATE_X25519=$RATE_X25519 LT_DELAY_MS=$LT_DELAY_MS WINDOW=$WINDOW HOLD=$HOLD"

# One responder, one suite: load-tester single setups and a burst, then ike-load likewise.
measure() { # ROUND RESPONDER SUITE
  local round=$1 who=$2 suite=$3 s n drops0 drops line single=() k
  s=$(short "$suite")
  n=$(rate_n "$suite")

  # strongSwan's load-tester as initiator.
  start_responder "$who" "$suite"
  start_load_tester "$suite"
  drops0=$(udp_rcvbuf_errors "$NS_R")
  local idrops0 idrops
  idrops0=$(udp_in_errors "$NS_I")
  for ((k = 0; k < SETUPS; k++)); do
    line=$(ldt 1 0)
    [ "$(kv "$line" established)" = 1 ] || { note "round $round $s $who: a single load-tester setup failed: $line"; continue; }
    single+=("$(kv "$line" first_ms)")
  done
  [ ${#single[@]} -gt 0 ] && add "lt_setup_${who}_$s" "$(p50 "${single[@]}")"
  line=$(ldt "$n" "$LT_DELAY_MS")
  local est children
  est=$(kv "$line" established)
  sleep 0.5
  children=$(children_of "$who")
  drops=$(($(udp_rcvbuf_errors "$NS_R") - drops0))
  # The initiator's socket overflows too when answers come back to back (InErrors counts
  # RcvbufErrors and checksum errors): the gateway once sent a batch's answers at once.
  idrops=$(($(udp_in_errors "$NS_I") - idrops0))
  [ "$est" = "$n" ] && add "lt_rate_${who}_$s" "$(kv "$line" rate)"
  local cookies=""
  [ "$who" = strongswan ] || cookies=" cookies $(cl_cookies)"
  if ((KEEP)); then
    cp "$R_LOG" "$tmp/r$round-$s-$who-lt.log"
    [ "$who" = strongswan ] ||
      timeout 15 ip netns exec "$NS_R" "$CLOISTER" sa --socket "$cl_dir/gw.sock" counters >"$tmp/r$round-$s-$who-lt.counters" 2>&1
    cp "$lt_conf_dir/charon.log" "$tmp/r$round-$s-$who-lt.initiator.log"
  fi
  printf 'round %s %-8s %-15s load-tester: setup ms p50 %s; burst %s: %s/%s in %s s = %s/s, %s retransmits, %s responder UDP drops, %s initiator UDP drops, %s child SAs%s\n' \
    "$round" "$s" "$who" "$(p50 "${single[@]}")" \
    "$n" "$est" "$n" "$(kv "$line" seconds)" "$(kv "$line" rate)" "$(kv "$line" retransmits)" "$drops" "$idrops" "$children" "$cookies"
  [ "$est" = "$n" ] || note "round $round $s $who: load-tester burst incomplete: $line"
  [ "$drops" = 0 ] && [ "$idrops" = 0 ] ||
    note "round $round $s $who: UDP drops in the burst: responder $drops, initiator $idrops"
  [ "$children" -ge "$n" ] || note "round $round $s $who: responder shows $children child SAs for $((n + ${#single[@]})) tunnels"
  stop_load_tester
  stop_responder "$who"

  # Cloister's initiator (cloister ike-load).
  ((IKE_LOAD)) || return 0
  ike_load "$round" "$who" "$suite" il
}

# `cloister ike-load` against one responder: single setups, then a burst; series PREFIX_*.
ike_load() { # ROUND RESPONDER SUITE PREFIX
  local round=$1 who=$2 suite=$3 p=$4 s n drops0 drops line est
  s=$(short "$suite")
  n=$(rate_n "$suite")
  start_responder "$who" "$suite"
  local il=(ip netns exec "$NS_I" "$CLOISTER" ike-load --local "$I_ADDR" --remote "$R_ADDR" --proposal "$suite"
    --esp "$(esp_for "$suite")" --psk-file "$tmp/psk.txt" --remote-id "$GW_ID" --timeout "$TIMEOUT")
  line=$(timeout $((TIMEOUT + 30)) "${il[@]}" --tunnels "$SETUPS" --window 1 --delete 2>&1 | grep '^ike-load result' || true)
  local single_p50
  single_p50=$(kv "$line" p50_ms)
  [ "$(kv "$line" established)" = "$SETUPS" ] && add "${p}_setup_${who}_$s" "$single_p50" ||
    note "round $round $s $who: ike-load single setups: ${line:-no result}"
  drops0=$(udp_rcvbuf_errors "$NS_R")
  line=$(timeout $((TIMEOUT + 30)) "${il[@]}" --tunnels "$n" --window "$WINDOW" 2>&1 | grep '^ike-load result' || true)
  drops=$(($(udp_rcvbuf_errors "$NS_R") - drops0))
  est=$(kv "$line" established)
  [ "$est" = "$n" ] && add "${p}_rate_${who}_$s" "$(kv "$line" rate)" || note "round $round $s $who: ike-load: ${line:-no result}"
  printf 'round %s %-8s %-15s ike-load:    setup ms p50 %s; %s tunnels, window %s: %s in %s s = %s/s, setup ms p50 %s p99 %s, %s retransmits, %s responder UDP drops\n' \
    "$round" "$s" "$who" "$single_p50" "$n" "$WINDOW" "$est" "$(kv "$line" seconds)" "$(kv "$line" rate)" \
    "$(kv "$line" p50_ms)" "$(kv "$line" p99_ms)" "$(kv "$line" retransmits)" "$drops"
  stop_responder "$who"
}

for ((round = 1; round <= ROUNDS; round++)); do
  for suite in "${SUITES[@]}"; do
    if ((round % 2)); then order=(cloister strongswan); else order=(strongswan cloister); fi
    ((INLINE)) && order+=(cloister-inline)
    for who in "${order[@]}"; do measure "$round" "$who" "$suite"; done
  done
  # The hybrid against x25519 alone, both through the product (process enclave).
  if ((HYBRID)); then
    if ((round % 2)); then hy=("$HYBRID_SUITE" aes256gcm16-prfsha256-x25519); else hy=(aes256gcm16-prfsha256-x25519 "$HYBRID_SUITE"); fi
    for suite in "${hy[@]}"; do ike_load "$round" cloister "$suite" hy; done
  fi
done

# ---- HOLD tunnels held at once (x25519), memory per IKE SA -----------------------------
hold_line=()
hold() { # RESPONDER
  local who=$1 suite=aes256gcm16-prfsha256-x25519 left chunk est=0 line before_g before_e after_g after_e children
  start_responder "$who" "$suite"
  start_load_tester "$suite"
  sleep 1
  before_g=$(rss_kb "$R_PID")
  [ "$who" = cloister ] && before_e=$(rss_kb "$ENCLAVE_PID")
  left=$HOLD
  while ((left > 0)); do
    chunk=$((left < 250 ? left : 250))
    line=$(ldt "$chunk" 0)
    line=$(kv "$line" established)
    est=$((est + ${line:-0}))
    left=$((left - chunk))
  done
  sleep 1
  children=$(children_of "$who")
  after_g=$(rss_kb "$R_PID")
  if [ "$who" = cloister ]; then
    after_e=$(rss_kb "$ENCLAVE_PID")
    # The gateway logs the enclave's bytes for each IKE SA around its clear-and-seal.
    local trusted
    trusted=$(sed -n 's/.*trusted bytes of this IKE SA \([0-9]* -> [0-9]*\) after clear-and-seal.*/\1/p' "$R_LOG" | tail -1)
    hold_line+=("$(printf 'cloister:   %s/%s established, %s child SAs; untrusted (gateway) RSS %s -> %s KiB = %s B per IKE SA; trusted (enclave process) RSS %s -> %s KiB = %s B per IKE SA; the enclave accounts %s B per IKE SA around clear-and-seal' \
      "$est" "$HOLD" "$children" "$before_g" "$after_g" $(((after_g - before_g) * 1024 / HOLD)) \
      "$before_e" "$after_e" $(((after_e - before_e) * 1024 / HOLD)) "${trusted:-?}")")
  else
    hold_line+=("$(printf 'strongswan: %s/%s established, %s child SAs; charon RSS %s -> %s KiB = %s B per IKE SA' \
      "$est" "$HOLD" "$children" "$before_g" "$after_g" $(((after_g - before_g) * 1024 / HOLD)))")
  fi
  stop_load_tester
  stop_responder "$who"
}
if ((HOLD > 0)); then
  hold cloister
  hold strongswan
fi

# ---- summary ------------------------------------------------------------------------------
echo
echo "== results: median [min-max] over $ROUNDS rounds"
responders=(cloister strongswan)
((INLINE)) && responders+=(cloister-inline)
header() {
  printf '  %-11s %-8s' initiator suite
  for who in "${responders[@]}"; do printf ' %-22s' "$who"; done
  printf ' %s\n' "$1"
}
if ((${#SUITES[@]})); then
echo "single-tunnel setup time, ms: each round's p50 of $SETUPS setups one after another"
echo "  (load-tester: request to IKE SA established; ike-load: initiate to first child SA ready)"
header "issue: strongSwan both ends"
for init in load-tester ike-load; do
  p=$([ "$init" = load-tester ] && echo lt || echo il)
  for suite in "${SUITES[@]}"; do
    s=$(short "$suite")
    printf '  %-11s %-8s' "$init" "$s"
    for who in "${responders[@]}"; do printf ' %-22s' "$(stat "${p}_setup_${who}_$s")"; done
    printf ' %s\n' "$([ "$init" = ike-load ] && echo - || { [ "$s" = modp3072 ] && echo 15.2 || echo 3.0; })"
  done
done
echo "setup rate, tunnels/s (load-tester: a burst of RATE_MODP=$RATE_MODP / RATE_X25519=$RATE_X25519; ike-load: same counts, window $WINDOW)"
header "cloister/strongswan$( ((INLINE)) && echo ' inline/strongswan') (issue: strongSwan both ends)"
for init in load-tester ike-load; do
  p=$([ "$init" = load-tester ] && echo lt || echo il)
  for suite in "${SUITES[@]}"; do
    s=$(short "$suite")
    printf '  %-11s %-8s' "$init" "$s"
    for who in "${responders[@]}"; do printf ' %-22s' "$(stat "${p}_rate_${who}_$s")"; done
    printf ' %s' "$(ratio "${p}_rate_cloister_$s" "${p}_rate_strongswan_$s")"
    ((INLINE)) && printf ' %s' "$(ratio "${p}_rate_cloister-inline_$s" "${p}_rate_strongswan_$s")"
    printf ' %s\n' "$([ "$init" = ike-load ] && echo - || { [ "$s" = modp3072 ] && echo '(147)' || echo '(1150)'; })"
  done
done
fi
if ((HYBRID)); then
  echo "post-quantum hybrid (x25519 + ML-KEM-768 in IKE_INTERMEDIATE) against x25519 alone:"
  echo "  cloister responder (process enclave), cloister ike-load initiator, window $WINDOW"
  printf '  %-28s %-22s %-22s %s\n' "" x25519 hybrid hybrid/x25519
  printf '  %-28s %-22s %-22s %s\n' "single setup, ms p50" "$(stat hy_setup_cloister_x25519)" \
    "$(stat hy_setup_cloister_hybrid)" "$(ratio hy_setup_cloister_hybrid hy_setup_cloister_x25519)"
  printf '  %-28s %-22s %-22s %s\n' "setup rate, tunnels/s" "$(stat hy_rate_cloister_x25519)" \
    "$(stat hy_rate_cloister_hybrid)" "$(ratio hy_rate_cloister_hybrid hy_rate_cloister_x25519)"
fi
if ((HOLD > 0)); then
  echo "$HOLD tunnels held (x25519, load-tester, each IKE SA with one child SA):"
  for l in "${hold_line[@]}"; do echo "  $l"; done
fi
if [ -s "$notes" ]; then
  echo "notes:"
  sed 's/^/  /' "$notes"
fi
if ((${#SUITES[@]})); then
  echo "ike-load ratio vs strongswan modp3072=$(ratio il_rate_cloister_modp3072 il_rate_strongswan_modp3072) x25519=$(ratio il_rate_cloister_x25519 il_rate_strongswan_x25519)"
  echo "ike setup rate ratio vs strongswan modp3072=$(ratio lt_rate_cloister_modp3072 lt_rate_strongswan_modp3072) x25519=$(ratio lt_rate_cloister_x25519 lt_rate_strongswan_x25519)"
fi
((HYBRID)) && echo "ike hybrid setup rate ratio vs x25519 (cloister, ike-load)=$(ratio hy_rate_cloister_hybrid hy_rate_cloister_x25519)"

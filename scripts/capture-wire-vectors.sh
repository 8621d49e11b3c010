#!/usr/bin/env bash
# Regenerates crates/wire/tests/vectors/ from a real exchange between two strongSwan 5.9
# instances (charon + kernel-libipsec, since this kernel has no ESP) in network namespaces:
# IKE_SA_INIT, IKE_AUTH (PSK), CREATE_CHILD_SA (child and IKE rekey), INFORMATIONAL (delete),
# and the ESP-in-UDP packets of pings through the tunnel, over IPv4 and IPv6 outer addresses.
# Also keeps charon's level-4 logs (which print SKEYSEED and SK_*) for key-derivation checks.
#
# Usage: scripts/capture-wire-vectors.sh [OUTDIR]   (root; installs nothing: run setup.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-$ROOT/crates/wire/tests/vectors}
WORK=$(mktemp -d /tmp/cloister-capture.XXXXXX)
TAG="cltcap$$"
NS_A="${TAG}a"; NS_B="${TAG}b"
PIDS=()

cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
  if [ $rc -ne 0 ]; then echo "capture failed; logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# wait_for CMD...: retries a command for at most 10 s.
wait_for() { for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "timeout: $*" >&2; return 1; }

charon_conf() { # side dir
  cat > "$2/strongswan.conf" <<CONF
charon {
  load = random nonce openssl pem pkcs1 pkcs8 x509 pubkey curve25519 hmac kdf sha2 aes gcm chapoly kernel-libipsec kernel-netlink socket-default vici updown
  install_virtual_ip = no
  plugins {
    vici { socket = unix://$2/charon.vici }
  }
  filelog {
    main { path = $2/charon.log
      time_format = %s
      default = 1
      ike = 4
      chd = 4
      enc = 2
      net = 2
    }
  }
}
CONF
}

swanctl_conf() { # dir local remote local_ts remote_ts local_id remote_id
  mkdir -p "$1/swanctl"/{x509,x509ca,x509ocsp,x509aa,x509ac,x509crl,pubkey,private,rsa,ecdsa,bliss,pkcs8,pkcs12}
  cat > "$1/swanctl/swanctl.conf" <<CONF
connections {
  net {
    version = 2
    local_addrs = $2
    remote_addrs = $3
    proposals = aes256gcm16-prfsha256-ecp256
    local { auth = psk
            id = $6 }
    remote { auth = psk
             id = $7 }
    children {
      net {
        local_ts = $4
        remote_ts = $5
        esp_proposals = aes256gcm16
        start_action = none
      }
    }
  }
}
secrets {
  ike-net { id-a = $6
            id-b = $7
            secret = "cloister-capture-psk-0123456789" }
}
CONF
}

run_family() { # v4|v6
  local fam=$1 a_out b_out a_in b_in plen iplen
  if [ "$fam" = v4 ]; then
    a_out=198.18.0.1; b_out=198.18.0.2; plen=24; a_in=198.19.1.1; b_in=198.19.2.1; iplen=32
  else
    a_out=2001:db8::1; b_out=2001:db8::2; plen=64; a_in=2001:db8:1::1; b_in=2001:db8:2::1; iplen=128
  fi
  ip netns add "$NS_A"; ip netns add "$NS_B"
  ip link add "${TAG}x" type veth peer name "${TAG}y"
  ip link set "${TAG}x" netns "$NS_A" name eth0
  ip link set "${TAG}y" netns "$NS_B" name eth0
  for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" link set lo up; ip -n "$ns" link set eth0 up
    # Checksum offload would leave the sender's UDP checksums unfilled in the capture.
    ip netns exec "$ns" ethtool -K eth0 tx off >/dev/null
  done
  local dad=(); [ "$fam" = v6 ] && dad=(nodad)
  ip -n "$NS_A" addr add "$a_out/$plen" dev eth0 "${dad[@]}"; ip -n "$NS_B" addr add "$b_out/$plen" dev eth0 "${dad[@]}"
  ip -n "$NS_A" addr add "$a_in/$iplen" dev lo; ip -n "$NS_B" addr add "$b_in/$iplen" dev lo

  local d
  for side in A B; do
    d="$WORK/$fam/$side"; mkdir -p "$d"
    charon_conf "$side" "$d"
  done
  swanctl_conf "$WORK/$fam/A" "$a_out" "$b_out" "$a_in/$iplen" "$b_in/$iplen" site-a.cloister.test site-b.cloister.test
  swanctl_conf "$WORK/$fam/B" "$b_out" "$a_out" "$b_in/$iplen" "$a_in/$iplen" site-b.cloister.test site-a.cloister.test

  ip netns exec "$NS_A" tshark -q -i eth0 -f 'udp port 500 or udp port 4500' -w "$WORK/$fam/cap.pcap" >"$WORK/$fam/tshark.log" 2>&1 &
  PIDS+=($!)
  wait_for grep -q 'Capturing on' "$WORK/$fam/tshark.log"
  for side in A B; do
    local ns=$NS_A; [ $side = B ] && ns=$NS_B
    d="$WORK/$fam/$side"
    # A private /run per charon: its PID file path is fixed at /var/run/charon.pid.
    ip netns exec "$ns" env STRONGSWAN_CONF="$d/strongswan.conf" \
      sh -c 'mount -t tmpfs cloister-run /run && exec /usr/lib/ipsec/charon' >"$d/stdout.log" 2>&1 &
    PIDS+=($!)
    wait_for test -S "$d/charon.vici"
    ip netns exec "$ns" swanctl --load-all --file "$d/swanctl/swanctl.conf" --uri "unix://$d/charon.vici" >/dev/null
  done
  local A="$WORK/$fam/A"
  # swanctl wants its command first, then options.
  sw_a() { ip netns exec "$NS_A" swanctl "$@" --uri "unix://$WORK/$fam/A/charon.vici"; }
  sw_a --initiate --child net --timeout 10 >/dev/null
  ip netns exec "$NS_A" ping -q -c 3 -i 0.2 -W 2 -I "$a_in" "$b_in" >/dev/null
  sw_a --rekey --child net >/dev/null; sleep 1
  ip netns exec "$NS_A" ping -q -c 2 -i 0.2 -W 2 -I "$a_in" "$b_in" >/dev/null
  sw_a --rekey --ike net >/dev/null; sleep 1
  ip netns exec "$NS_A" ping -q -c 2 -i 0.2 -W 2 -I "$a_in" "$b_in" >/dev/null
  sw_a --terminate --ike net --timeout 10 >/dev/null; sleep 0.5

  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  ip netns del "$NS_A"; ip netns del "$NS_B"
  local py=("$ROOT/.deps/venv/bin/python" "$ROOT/scripts/split-capture.py")
  "${py[@]}" --trim-log "$A/charon.log" "$OUT/strongswan-$fam-initiator.log"
  "${py[@]}" --trim-log "$WORK/$fam/B/charon.log" "$OUT/strongswan-$fam-responder.log"
  "${py[@]}" "$WORK/$fam/cap.pcap" "$OUT" "$fam"
}

mkdir -p "$OUT"
rm -f "$OUT"/ike-*.bin "$OUT"/esp-*.bin "$OUT"/ip-*.bin
run_family v4
run_family v6
echo "vectors written to $OUT:"; ls "$OUT" | sed 's/^/  /'

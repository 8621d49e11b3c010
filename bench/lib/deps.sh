# Extra dependencies of bench/esp-e2e.sh, installed on first use (CI runs no benchmarks, so
# scripts/setup.sh does not pay for them). Sourced; expects ROOT (the repository root).
#   - wireguard-go and wireguard-tools (`wg`), iperf3, strongSwan, ping, sysctl, python3:
#     Debian packages
#   - boringtun-cli: crates.io, built into .deps/cargo
#   - upstream wireguard-go (golang.zx2c4.com/wireguard, with its TUN and UDP offloads, which
#     Debian's 2022 package predates): `go install` of a pinned version into .deps/go/bin,
#     when the variant is asked for (needs the `go` command)
# Idempotent: each step checks first.

# The upstream wireguard-go the bench builds (its module version: the newest served when the
# variant was added).
WG_UPSTREAM_VERSION=v0.0.0-20260522210424-ecfc5a8d5446

e2e_deps() {
  local deps="$ROOT/.deps"
  mkdir -p "$deps"
  local missing=()
  for p in wireguard-go wireguard-tools iperf3 iproute2 iputils-ping procps python3 strongswan-charon strongswan-swanctl libcharon-extra-plugins \
    libstrongswan-standard-plugins libstrongswan-extra-plugins; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "[esp-e2e] installing Debian packages: ${missing[*]}" >&2
    local created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      # Keep package scripts from starting services (charon); removed again below.
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; created_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
      >"$deps/apt-e2e.log" 2>&1 || { tail -30 "$deps/apt-e2e.log" >&2; [ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d; return 1; }
    [ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  fi
  if [[ " ${VARIANTS[*]} " == *" wireguard-go-upstream "* ]] && [ ! -x "$deps/go/bin/wireguard" ]; then
    local go
    go=$(command -v go || echo /usr/local/go/bin/go)
    [ -x "$go" ] || { echo "[esp-e2e] wireguard-go-upstream needs the go command (leave the variant out with E2E_VARIANTS)" >&2; return 1; }
    echo "[esp-e2e] building upstream wireguard-go $WG_UPSTREAM_VERSION into .deps/go/bin (once)" >&2
    GOBIN="$deps/go/bin" GOPATH="$deps/go/path" GOFLAGS=-mod=mod "$go" install "golang.zx2c4.com/wireguard@$WG_UPSTREAM_VERSION" \
      >"$deps/wireguard-upstream.log" 2>&1 || { tail -30 "$deps/wireguard-upstream.log" >&2; return 1; }
  fi
  if [ ! -x "$deps/cargo/bin/boringtun-cli" ]; then
    echo "[esp-e2e] building boringtun-cli (crates.io) into .deps/cargo (a few minutes, once)" >&2
    cargo install -q --locked --root "$deps/cargo" boringtun-cli >"$deps/boringtun-cli.log" 2>&1 \
      || { tail -30 "$deps/boringtun-cli.log" >&2; return 1; }
  fi
}

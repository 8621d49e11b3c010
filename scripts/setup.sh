#!/usr/bin/env bash
# Installs what Cloister's build, demo and tests need on a fresh Debian 12 machine.
# Idempotent: each step checks first and does nothing when its part is already there.
# Called by scripts/demo.sh and scripts/test.sh; safe to run by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS="$ROOT/.deps"
mkdir -p "$DEPS"

say() { printf '[setup] %s\n' "$*"; }

# Debian packages. Daemons in these packages (strongSwan, etcd) must not start as system
# services: tests start their own instances inside namespaces. cmake: a fallback builder of
# aws-lc-sys (the enclave's AWS-LC), which otherwise builds with the C compiler alone.
APT_PACKAGES=(
  build-essential cmake pkg-config ca-certificates curl iproute2 iputils-ping procps kmod ethtool
  strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins libstrongswan-extra-plugins
  iperf3 tshark nftables softhsm2 opensc etcd-server etcd-client protobuf-compiler
  python3 python3-venv python3-pip fonts-dejavu-core
)
# libreswan's dependencies: its package conflicts with strongSwan's, so we unpack the .deb
# privately (below) and install only what pluto links against.
LIBRESWAN_DEPS=(libnss3 libnss3-tools libnspr4 libldns3 libunbound8 libevent-2.1-7 libevent-pthreads-2.1-7 libcap-ng0 libaudit1 libpam0g libcurl3-gnutls libsystemd0 libseccomp2 libldap-2.5-0)

missing=()
for p in "${APT_PACKAGES[@]}" "${LIBRESWAN_DEPS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    say "missing Debian packages (run as root to install): ${missing[*]}"; exit 1
  fi
  say "installing: ${missing[*]}"
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    # Keep package scripts from starting charon/etcd as services; removed again below.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; created_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
  apt-get install -y -q --no-install-recommends "${missing[@]}" >"$DEPS/apt.log" 2>&1 || { tail -30 "$DEPS/apt.log"; exit 1; }
  [ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  # Services a package may still have started (no systemd here: only the init scripts).
  # Only after an install: `ipsec stop` ends every charon on the machine, including the
  # namespaced ones of tests, benchmarks or a demo running at the same time.
  for svc in strongswan-starter ipsec etcd; do
    if [ -x "/etc/init.d/$svc" ]; then "/etc/init.d/$svc" stop >/dev/null 2>&1 || true; fi
  done
fi

# libreswan 4.10, unpacked under .deps/libreswan (pluto runs from there in IKE interop tests).
if [ ! -x "$DEPS/libreswan/usr/libexec/ipsec/pluto" ]; then
  say "unpacking libreswan privately"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -q libreswan >/dev/null 2>&1) || { say "cannot download libreswan"; rm -rf "$tmp"; exit 1; }
  rm -rf "$DEPS/libreswan"; mkdir -p "$DEPS/libreswan"
  dpkg -x "$tmp"/libreswan_*.deb "$DEPS/libreswan"
  rm -rf "$tmp"
fi

# scapy (independent ESP implementation for interop tests) in a project venv.
if ! "$DEPS/venv/bin/python" -c 'import scapy, cryptography' >/dev/null 2>&1; then
  say "installing scapy into .deps/venv"
  python3 -m venv "$DEPS/venv"
  "$DEPS/venv/bin/pip" install -q --disable-pip-version-check 'scapy==2.6.1' 'cryptography>=42'
fi

# Rust: the toolchain comes with the machine (rustup); refuse clearly if it does not.
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; else
    say "cargo not found: install Rust >= 1.95 with rustup"; exit 1
  fi
fi

# cargo-fuzz for the short fuzz runs in tests; only where a nightly toolchain exists.
if rustup toolchain list 2>/dev/null | grep -q '^nightly' && [ ! -x "$DEPS/cargo/bin/cargo-fuzz" ]; then
  say "building cargo-fuzz into .deps/cargo"
  cargo install -q --locked --root "$DEPS/cargo" cargo-fuzz@0.12.0 >"$DEPS/cargo-fuzz.log" 2>&1 \
    || say "cargo-fuzz could not be built (fuzz runs will be skipped): see .deps/cargo-fuzz.log"
fi
say "ready"

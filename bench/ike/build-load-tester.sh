#!/usr/bin/env bash
# Builds strongSwan's load-tester plugin (which Debian does not ship) for the installed
# charon, plus bench/ike/ldt-client.c, into a cache: .deps/strongswan-load-tester/<version>/.
# Prints that directory on its last line. Needs root on first use (build dependencies).
#
# Source, first that works: Debian's source package of the installed version
# (`apt-get source` through a private deb-src list, nothing added to the system's lists);
# else the newest Debian source package of the same upstream version (security updates
# may have left the mirror); else download.strongswan.org's tarball of that version.
# It is configured like Debian's package where that changes the plugin's ABI
# (--enable-mediation adds members to charon's daemon_t) and only the plugin is compiled,
# in a temporary directory that is removed afterwards. charon loads it with LD_PRELOAD
# (plugin_loader looks a plugin's constructor up in the process before the plugin dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

version=$(dpkg-query -W -f='${Version}' strongswan-charon 2>/dev/null) ||
  { echo "strongswan-charon is not installed (run scripts/setup.sh)" >&2; exit 1; }
upstream=${version#*:}
upstream=${upstream%%-*}
out="$root/.deps/strongswan-load-tester/$version"
client_src="$root/bench/ike/ldt-client.c"
if [ -f "$out/libstrongswan-load-tester.so" ] && [ -x "$out/ldt-client" ] && [ "$out/ldt-client" -nt "$client_src" ]; then
  echo "$out"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "building the load-tester plugin needs root (build dependencies)" >&2; exit 1; }

# Build dependencies, only what is missing, once.
need=()
for p in gcc make libc6-dev pkg-config dpkg-dev bzip2 xz-utils curl ca-certificates; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "ike-setup: installing build dependencies: ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

tmp=$(mktemp -d /tmp/cloister-load-tester.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# A private deb-src list for this release's archives (the system's lists stay untouched).
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
mkdir -p apt/lists/partial apt/cache/archives/partial
cat > apt/sources.list <<EOF
deb-src http://deb.debian.org/debian $codename main
deb-src http://deb.debian.org/debian $codename-updates main
deb-src http://deb.debian.org/debian-security $codename-security main
EOF
aptq=(-q -o "Dir::Etc::SourceList=$tmp/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$tmp/apt/lists" -o "Dir::Cache=$tmp/apt/cache" -o APT::Sandbox::User=root)
source=""
if timeout 120 apt-get "${aptq[@]}" update >apt/update.log 2>&1; then
  candidates=("$version")
  while read -r v; do
    [ "$v" != "$version" ] && [ "${v%%-*}" = "$upstream" ] && candidates+=("$v")
  done < <(apt-cache "${aptq[@]}" showsrc strongswan 2>/dev/null | awk '/^Version:/ {print $2}' | sort -rV)
  for v in "${candidates[@]}"; do
    if timeout 300 apt-get "${aptq[@]}" source --download-only "strongswan=$v" >apt/source.log 2>&1 &&
      dpkg-source -x "strongswan_${v#*:}.dsc" src >apt/extract.log 2>&1; then
      source="Debian source package strongswan $v"
      [ "$v" = "$version" ] || source="$source (installed: $version; its source is not on the mirror)"
      break
    fi
    rm -rf src
  done
fi
if [ -z "$source" ]; then
  timeout 300 curl -fsSLo ss.tar.bz2 "https://download.strongswan.org/strongswan-$upstream.tar.bz2" ||
    { echo "no strongSwan $upstream source: Debian's mirror and download.strongswan.org failed" >&2; exit 1; }
  mkdir src && tar -xjf ss.tar.bz2 -C src --strip-components=1
  source="download.strongswan.org strongswan-$upstream.tar.bz2 (upstream; installed: $version)"
fi
echo "ike-setup: building the load-tester plugin from $source" >&2

cd src
# Debian's layout and the options that change structures the plugin uses (daemon_t has
# mediation members with --enable-mediation); gmp is not needed for one plugin.
./configure --prefix=/usr --sysconfdir=/etc --libdir=/usr/lib --libexecdir=/usr/lib \
  --enable-mediation --enable-load-tester --disable-gmp >"$tmp/configure.log" 2>&1 ||
  { tail -20 "$tmp/configure.log" >&2; exit 1; }
grep -q '^#define ME\b' config.h || { echo "configure did not enable mediation (ABI mismatch)" >&2; exit 1; }
make -C src/libcharon/plugins/load_tester libstrongswan-load-tester.la >"$tmp/make.log" 2>&1 ||
  { tail -20 "$tmp/make.log" >&2; exit 1; }
mkdir -p "$out"
cp src/libcharon/plugins/load_tester/.libs/libstrongswan-load-tester.so "$out/"
gcc -O2 -Wall -o "$out/ldt-client" "$client_src"
echo "$source" > "$out/SOURCE"
echo "$out"

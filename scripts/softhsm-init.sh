#!/usr/bin/env bash
# Initialise a private SoftHSM2 token in DIR for tests and the demo of crates/migrate.
#
#   scripts/softhsm-init.sh DIR
#
# Writes DIR/softhsm2.conf (token store DIR/tokens) and initialises one token in it. Nothing
# outside DIR is touched: no /etc/softhsm, no /var/lib/softhsm, no environment of the caller.
# Use the token by exporting the printed SOFTHSM2_CONF. Running it again on the same DIR
# leaves an existing token as it is (idempotent).
#
# The PINs are TEST PINs, printed and documented on purpose; a production HSM's officer sets
# real ones. Override with CLOISTER_HSM_LABEL, CLOISTER_HSM_SO_PIN, CLOISTER_HSM_USER_PIN.
set -euo pipefail

if [[ $# -ne 1 || -z "$1" ]]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi

label=${CLOISTER_HSM_LABEL:-cloister-test}
so_pin=${CLOISTER_HSM_SO_PIN:-cloister-so-test}
user_pin=${CLOISTER_HSM_USER_PIN:-cloister-user-test}

if ! command -v softhsm2-util >/dev/null; then
    echo "softhsm2-util not found: install Debian's softhsm2 package (scripts/setup.sh does)" >&2
    exit 1
fi

mkdir -p "$1/tokens"
dir=$(cd "$1" && pwd)
conf="$dir/softhsm2.conf"
cat >"$conf" <<EOF
# Private SoftHSM2 configuration written by scripts/softhsm-init.sh.
directories.tokendir = $dir/tokens
objectstore.backend = file
log.level = ERROR
slots.removable = false
EOF

export SOFTHSM2_CONF="$conf"
# softhsm2-util prints "Label:            <label>" per initialised token.
if softhsm2-util --show-slots 2>/dev/null | grep -Eq "^[[:space:]]*Label:[[:space:]]+${label}[[:space:]]*$"; then
    echo "token '$label' already initialised in $dir" >&2
else
    softhsm2-util --init-token --free --label "$label" --so-pin "$so_pin" --pin "$user_pin" >/dev/null
    echo "token '$label' initialised in $dir" >&2
fi
echo "SOFTHSM2_CONF=$conf"

#!/usr/bin/env bash
# The enclave boundary as a crate boundary (docs/architecture.md): the untrusted crates, the
# process backend's host side among them, and the platform (which holds the platform's
# secrets but no tenant key) link the call surface (cloister-enclave-api) and, where they
# verify evidence, cloister-attest, never the trusted core (cloister-enclave); the call
# surface links no cryptography.
# Prints each crate's enclave-side dependencies and exits non-zero on a breach.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
bad=0
for c in ike esp store migrate dataplane gateway enclave-host platform control; do
  deps=$(cargo tree --locked -e normal -p "cloister-$c" --prefix none | awk '/^cloister-(enclave|attest)/ {print $1}' | sort -u | tr '\n' ' ')
  echo "cloister-$c: ${deps:-none}"
  if grep -qE '(^| )cloister-enclave( |$)' <<<"$deps"; then echo "  ! cloister-$c links the trusted core"; bad=1; fi
done
crypto=$(cargo tree --locked -e normal -p cloister-enclave-api --prefix none | awk '{print $1}' \
  | grep -E '^(ring|aws-lc-sys|aws-lc-rs|rsa|p256|p384|ecdsa|aes|cbc|sha1|sha2|hmac|chacha20poly1305|x25519-dalek|crypto-bigint)$' | sort -u || true)
if [ -n "$crypto" ]; then echo "  ! cloister-enclave-api links cryptography: $crypto"; bad=1; else echo "cloister-enclave-api: no cryptography"; fi
[ "$bad" -eq 0 ] && echo "boundary: ok"
exit "$bad"

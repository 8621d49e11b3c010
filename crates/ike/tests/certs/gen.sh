#!/bin/sh
# Regenerates the test PKI of crates/ike/tests (see README.md here). Needs the openssl CLI
# (1.1.1 or 3.x). Fixed validity dates keep the files usable whenever they were made: the
# tests check them against a fixed wall-clock time (2026-01-01).
set -eu
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

START=20250101000000Z
END=20350101000000Z

# key NAME rsa|rsa4096|p256|p384: a private key in $work, and its PKCS#8 DER (what the enclave takes) here.
key() {
    case $2 in
        rsa) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/$1.key" 2>/dev/null ;;
        rsa4096) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:4096 -out "$work/$1.key" 2>/dev/null ;;
        p256) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/$1.key" ;;
        p384) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-384 -out "$work/$1.key" ;;
    esac
    openssl pkcs8 -topk8 -nocrypt -in "$work/$1.key" -outform DER -out "$1.key.der"
}

cat > "$work/ca.cnf" <<'CNF'
[ca]
default_ca = test_ca
[test_ca]
dir = $ENV::CADIR
database = $dir/index.txt
new_certs_dir = $dir
serial = $dir/serial
default_md = sha256
policy = any
unique_subject = no
email_in_dn = no
[any]
commonName = supplied
[root]
basicConstraints = critical, CA:true
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[intermediate]
basicConstraints = critical, CA:true, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[ee]
basicConstraints = CA:false
keyUsage = critical, digitalSignature
subjectAltName = $ENV::SAN
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[ee_keyenc]
basicConstraints = CA:false
keyUsage = critical, keyEncipherment
subjectAltName = $ENV::SAN
CNF

# sign NAME SUBJECT ISSUER EXTENSIONS [START END [openssl ca options...]]: NAME.pem, issued by
# ISSUER (a name made here, or "self") with the key $work/NAME.key.
sign() {
    name=$1 subject=$2 issuer=$3 ext=$4
    start=${5:-$START} end=${6:-$END}
    shift 4; [ $# -ge 2 ] && shift 2
    export CADIR="$work/ca-$issuer"
    if [ "$issuer" = self ]; then
        export CADIR="$work/ca-$name"
    fi
    mkdir -p "$CADIR"; [ -f "$CADIR/index.txt" ] || { : > "$CADIR/index.txt"; echo 01 > "$CADIR/serial"; }
    openssl req -new -key "$work/$name.key" -subj "$subject" -out "$work/$name.csr"
    if [ "$issuer" = self ]; then
        set -- -selfsign -keyfile "$work/$name.key" "$@"
    else
        set -- -cert "$issuer.pem" -keyfile "$work/$issuer.key" "$@"
    fi
    openssl ca -batch -config "$work/ca.cnf" -preserveDN -notext -extensions "$ext" \
        -startdate "$start" -enddate "$end" -in "$work/$name.csr" -out "$name.pem" "$@" 2>/dev/null
}

A_SAN="DNS:site-a.cloister.test, IP:198.18.0.1, IP:2001:db8::1, email:admin@site-a.cloister.test"
B_SAN="DNS:site-b.cloister.test, IP:198.18.0.2"
export SAN="$A_SAN"

# Roots: RSA, P-384, and an unrelated RSA one.
key ca-rsa rsa
sign ca-rsa "/C=CH/O=Cloister Test/CN=Cloister Test RSA CA" self root
key ca-ec p384
sign ca-ec "/C=CH/O=Cloister Test/CN=Cloister Test ECDSA CA" self root "$START" "$END" -md sha384
key ca-other rsa
sign ca-other "/C=CH/O=Somebody Else/CN=Other CA" self root
# An intermediate under the RSA root, signing with RSASSA-PSS.
key int-rsa rsa
sign int-rsa "/C=CH/O=Cloister Test/CN=Cloister Test RSA Intermediate" ca-rsa intermediate

# End entities: site A and site B in each key type.
for t in rsa p256 p384; do
    ca=ca-rsa md=sha256; [ $t = rsa ] || { ca=ca-ec md=sha384; }
    key a-$t $t
    SAN="$A_SAN" sign a-$t "/C=CH/O=Cloister Test/CN=site-a.cloister.test" $ca ee "$START" "$END" -md $md
    key b-$t $t
    SAN="$B_SAN" sign b-$t "/C=CH/O=Cloister Test/CN=site-b.cloister.test" $ca ee "$START" "$END" -md $md
done
key b-int rsa
SAN="$B_SAN" sign b-int "/C=CH/O=Cloister Test/CN=site-b.cloister.test" int-rsa ee "$START" "$END" \
    -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:digest
cat b-int.pem int-rsa.pem > b-int-chain.pem

# Broken ones, all with site A's RSA key.
cp "$work/a-rsa.key" "$work/a-other.key" && rm -f a-other.key.der
SAN="$A_SAN" sign a-other "/C=CH/O=Cloister Test/CN=site-a.cloister.test" ca-other ee
cp "$work/a-rsa.key" "$work/a-expired.key"
SAN="$A_SAN" sign a-expired "/C=CH/O=Cloister Test/CN=site-a.cloister.test" ca-rsa ee \
    20200101000000Z 20210101000000Z
cp "$work/a-rsa.key" "$work/a-keyenc.key"
SAN="$A_SAN" sign a-keyenc "/C=CH/O=Cloister Test/CN=site-a.cloister.test" ca-rsa ee_keyenc
cp "$work/a-rsa.key" "$work/a-by-ee.key"
SAN="$A_SAN" sign a-by-ee "/C=CH/O=Cloister Test/CN=site-a.cloister.test" b-rsa ee

# A whole RSA-4096 PKI with an intermediate, so that each side's IKE_AUTH (its end entity,
# the intermediate and a 512-byte AUTH) is larger than 3 kB: an IP-fragmented datagram.
key ca-rsa4096 rsa4096
sign ca-rsa4096 "/C=CH/O=Cloister Test/CN=Cloister Test RSA-4096 CA" self root
key int-rsa4096 rsa4096
sign int-rsa4096 "/C=CH/O=Cloister Test/CN=Cloister Test RSA-4096 Intermediate" ca-rsa4096 intermediate
key a-int4096 rsa4096
SAN="$A_SAN" sign a-int4096 "/C=CH/O=Cloister Test/CN=site-a.cloister.test" int-rsa4096 ee
key b-int4096 rsa4096
SAN="$B_SAN" sign b-int4096 "/C=CH/O=Cloister Test/CN=site-b.cloister.test" int-rsa4096 ee
cat a-int4096.pem int-rsa4096.pem > a-int4096-chain.pem
cat b-int4096.pem int-rsa4096.pem > b-int4096-chain.pem

# Site A's RSA certificate also in DER, to load both encodings.
openssl x509 -in a-rsa.pem -outform DER -out a-rsa.der
rm -f ca-*.key.der int-rsa*.key.der

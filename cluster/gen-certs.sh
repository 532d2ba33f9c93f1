#!/usr/bin/env bash
# Makes a private certificate authority and one certificate for the nodes,
# for `hookraft serve --tls-cert --tls-key --tls-ca` (openssl, ECDSA P-256).
#
#   cluster/gen-certs.sh [DIR] [NAME ...]
#
# DIR (default cluster/certs) gets ca.pem, ca.key, node.pem and node.key.
# The node certificate is valid for every NAME (default: node1 node2 node3
# localhost) and for 127.0.0.1; one certificate shared by the nodes keeps a
# demo simple, give each node its own in production. An existing DIR/ca.key
# is reused, so new names can be added without re-distributing the CA.
# HOOKRAFT_CERT_DAYS sets the validity (default 825 days).
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${1:-cluster/certs}"
shift || true
names=("$@")
((${#names[@]})) || names=(node1 node2 node3 localhost)
days="${HOOKRAFT_CERT_DAYS:-825}"
command -v openssl >/dev/null || { echo "error: openssl is not installed" >&2; exit 1; }
mkdir -p "$dir"
umask 077

if [[ ! -f "$dir/ca.key" ]]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key.sec1"
    openssl pkcs8 -topk8 -nocrypt -in "$dir/ca.key.sec1" -out "$dir/ca.key"
    rm -f "$dir/ca.key.sec1"
    openssl req -x509 -new -key "$dir/ca.key" -sha256 -days "$days" -subj "/CN=hookraft cluster CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$dir/ca.pem"
fi

san="IP:127.0.0.1"
for name in "${names[@]}"; do san="$san,DNS:$name"; done
openssl ecparam -name prime256v1 -genkey -noout -out "$dir/node.key.sec1"
openssl pkcs8 -topk8 -nocrypt -in "$dir/node.key.sec1" -out "$dir/node.key"
rm -f "$dir/node.key.sec1"
openssl req -new -key "$dir/node.key" -subj "/CN=hookraft node" -out "$dir/node.csr"
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "$san" >"$dir/node.ext"
openssl x509 -req -in "$dir/node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -sha256 \
    -days "$days" -extfile "$dir/node.ext" -out "$dir/node.pem" 2>/dev/null
rm -f "$dir/node.csr" "$dir/node.ext" "$dir/ca.srl"
# The nodes run as an unprivileged user in the container: let them read
# their key; keep the CA's key to yourself.
chmod 0644 "$dir/ca.pem" "$dir/node.pem" "$dir/node.key"
echo "wrote $dir/ca.pem and $dir/node.pem (valid for $san) with their keys"

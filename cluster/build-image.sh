#!/usr/bin/env bash
# Builds the `hookraft:local` container image FROM scratch, without pulling
# anything: builds the release binary, stages a minimal root file system in a
# temporary build context (the binary, the shared libraries `ldd` lists at
# their own paths, the dynamic loader, glibc's NSS modules for files and DNS
# with /etc/nsswitch.conf, CA certificates, empty /tmp and /data), runs
# `docker build` on it with cluster/Dockerfile, and checks that the image runs.
#
# Environment:
#   HOOKRAFT_IMAGE   image tag to build            (default hookraft:local)
#   HOOKRAFT_BIN     use this binary, skip cargo   (default: build target/release/hookraft)
set -euo pipefail
cd "$(dirname "$0")/.."

image="${HOOKRAFT_IMAGE:-hookraft:local}"
bin="${HOOKRAFT_BIN:-}"

if [[ -z "$bin" ]]; then
    echo "== cargo build --release -p hookraft"
    cargo build --release -p hookraft
    bin="target/release/hookraft"
fi
[[ -x "$bin" ]] || { echo "error: no executable at $bin" >&2; exit 1; }
command -v docker >/dev/null || { echo "error: docker is not installed" >&2; exit 1; }

context="$(mktemp -d "${TMPDIR:-/tmp}/hookraft-image.XXXXXX")"
trap 'rm -rf "$context"' EXIT
root="$context/rootfs"
mkdir -p "$root/etc" "$context/writable/tmp" "$context/writable/data"
chmod 1777 "$context/writable/tmp"
chmod 0755 "$context/writable/data"

# Copies a file (following symlinks) into the root file system at its own path.
stage() {
    local path="$1"
    mkdir -p "$root$(dirname "$path")"
    cp -L "$path" "$root$path"
}

# Stages every shared library `ldd` lists for $1, and the loader.
stage_libraries_of() {
    local file="$1" listing
    listing="$(ldd "$file")" || { echo "error: ldd $file failed (a static binary needs no libraries; set them up by hand)" >&2; exit 1; }
    if grep -q "not found" <<<"$listing"; then
        echo "error: missing libraries for $file:" >&2
        grep "not found" <<<"$listing" >&2
        exit 1
    fi
    # Lines are `name => /path (0x...)`, `/path/ld-linux... (0x...)` or the vdso.
    awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$listing" | sort -u |
        while read -r library; do stage "$library"; done
}

echo "== staging the root file system in $context"
cp -L "$bin" "$root/hookraft"
chmod 0755 "$root/hookraft"
stage_libraries_of "$bin"

# NSS: glibc loads these by name at run time (ldd cannot see them). Take them
# from the directory libc came from, with whatever they link (libresolv).
libc_path="$(ldd "$bin" | awk '$1 ~ /^libc\.so/ { print $3 }')"
[[ -n "$libc_path" ]] || { echo "error: $bin does not link glibc's libc.so" >&2; exit 1; }
libdir="$(dirname "$libc_path")"
for nss in libnss_dns.so.2 libnss_files.so.2 libresolv.so.2; do
    if [[ -e "$libdir/$nss" ]]; then
        stage "$libdir/$nss"
        stage_libraries_of "$libdir/$nss"
    elif [[ "$nss" != libresolv.so.2 ]]; then
        echo "error: $libdir/$nss not found; service names would not resolve in the container" >&2
        exit 1
    fi
done
cat >"$root/etc/nsswitch.conf" <<'EOF'
hosts: files dns
passwd: files
group: files
EOF

if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    mkdir -p "$root/etc/ssl/certs"
    cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
else
    echo "warning: /etc/ssl/certs/ca-certificates.crt not found; https webhooks will fail certificate checks" >&2
fi

cp cluster/Dockerfile "$context/Dockerfile"
echo "== staged:"
(cd "$context" && find . -type f -o -type l | sort | sed 's/^/   /')

echo "== docker build -t $image"
docker build -t "$image" "$context"

echo "== smoke test: docker run --rm $image --version"
docker run --rm "$image" --version
echo "== built $image"

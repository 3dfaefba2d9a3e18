#!/usr/bin/env bash
# Builds the acode-run container image (Containerfile) on this machine, from no registry but the
# package registries: a static acode-run (musl) built with the pinned toolchain, a Debian minbase
# root file system made with debootstrap from the mirror this machine's apt uses, and `podman
# build` FROM scratch on them. No image is pulled.
#
#   scripts/image.sh [TAG]        TAG defaults to localhost/acode-run:VERSION
#
# What the image holds: /bin/sh and coreutils (a CI job's script runs in it), git and
# ca-certificates, bubblewrap (used where the runtime lets it mount a /proc; elsewhere acode-run
# falls back to Landlock and says why), and /usr/local/bin/acode-run. The root file system and the
# binary are cached under target/image/ (the rootfs by Debian release and package list: delete
# target/image/ to rebuild it); `podman build` reuses its layer cache when neither changed.
# Needs root (debootstrap), podman, debootstrap, musl-tools; installs the missing ones with apt-get
# when run as root, and the musl target with rustup.
set -euo pipefail
cd "$(dirname "$0")/.."

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
tag="${1:-localhost/acode-run:$version}"
packages="bubblewrap,git,ca-certificates"
target=x86_64-unknown-linux-musl
work="${CARGO_TARGET_DIR:-target}/image"
mkdir -p "$work"

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
command -v musl-gcc >/dev/null 2>&1 || missing+=(musl-tools)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/image.sh: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
  else
    echo "scripts/image.sh: needs ${missing[*]} (apt-get install them as root)" >&2
    exit 1
  fi
fi

# 1. The static binary, with the toolchain rust-toolchain.toml pins (cargo runs in this checkout).
rustup toolchain install >/dev/null
rustup target add "$target" >/dev/null
start=$SECONDS
# The C that ring and SQLite compile goes through musl-gcc (musl's headers), not the host's gcc.
CC_x86_64_unknown_linux_musl=musl-gcc cargo build --release --locked --target "$target" --bin acode-run
bin="${CARGO_TARGET_DIR:-target}/$target/release/acode-run"
# Static: no program interpreter (the dynamic loader) in its program headers.
if ! readelf --program-headers "$bin" >/dev/null || readelf --program-headers "$bin" | grep -q INTERP; then
  echo "scripts/image.sh: $bin is not a static executable" >&2
  exit 1
fi
echo "scripts/image.sh: static binary ready in $((SECONDS - start)) s" >&2

# 2. The root file system: Debian minbase of this machine's release, from its apt mirror.
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:?the host must be Debian}")"
mirror="$(
  { cat /etc/apt/sources.list 2>/dev/null; cat /etc/apt/sources.list.d/*.sources 2>/dev/null; } |
    awk -v s="$codename" '
      /^deb / && $3 == s { print $2; exit }
      /^URIs:/ { uri = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s && uri != "") { print uri; exit } }'
)"
[ -n "$mirror" ] || { echo "scripts/image.sh: no apt source for $codename in /etc/apt" >&2; exit 1; }
rootfs="$work/rootfs-$codename-$(echo "$packages" | tr ',' '-')"
if [ ! -e "$rootfs/.complete" ]; then
  start=$SECONDS
  rm -rf "$rootfs.partial"
  nice debootstrap --variant=minbase --include="$packages" "$codename" "$rootfs.partial" "$mirror" >&2
  # debootstrap may leave /proc and /sys of the target mounted.
  for m in $(awk -v d="$(realpath "$rootfs.partial")" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount --lazy "$m"
  done
  rm -rf "$rootfs.partial"/var/cache/apt/archives/*.deb "$rootfs.partial"/var/lib/apt/lists/*
  # A user for jobs that do not run as root (uid 1000, as CI images commonly have).
  echo 'user:x:1000:1000:user:/home/user:/bin/sh' >> "$rootfs.partial/etc/passwd"
  echo 'user:x:1000:' >> "$rootfs.partial/etc/group"
  mkdir -p "$rootfs.partial/home/user" && chown 1000:1000 "$rootfs.partial/home/user"
  touch "$rootfs.partial/.complete"
  rm -rf "$rootfs" && mv "$rootfs.partial" "$rootfs"
  echo "scripts/image.sh: root file system built in $((SECONDS - start)) s" >&2
fi

# 3. The image: FROM scratch, the root file system and the binary (Containerfile).
context="$work/context"
rm -rf "$context" && mkdir -p "$context"
if [ ! -e "$work/rootfs.tar" ] || [ "$rootfs/.complete" -nt "$work/rootfs.tar" ]; then
  tar --numeric-owner --exclude=./.complete -C "$rootfs" -cf "$work/rootfs.tar" .
fi
ln "$work/rootfs.tar" "$context/rootfs.tar" 2>/dev/null || cp "$work/rootfs.tar" "$context/rootfs.tar"
cp "$bin" "$context/acode-run"
start=$SECONDS
podman build --quiet --file Containerfile --tag "$tag" \
  --label "org.opencontainers.image.version=$version" "$context" >&2
echo "scripts/image.sh: built $tag in $((SECONDS - start)) s" >&2
echo "$tag"

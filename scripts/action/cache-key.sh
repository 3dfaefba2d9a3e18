#!/usr/bin/env bash
# The build cache's key: the pinned toolchain, Cargo.lock and the sources, so a cached binary is
# the one this checkout would build; restore-key (toolchain + Cargo.lock) lets a changed source
# rebuild from the cached dependencies. Writes key, restore-key and dir to $GITHUB_OUTPUT.
set -euo pipefail
src="${GITHUB_ACTION_PATH:?}"
channel="$(sed -n 's/^channel = "\(.*\)"/\1/p' "$src/rust-toolchain.toml")"
[ -n "$channel" ] || { echo "::error title=acode-run::no channel in $src/rust-toolchain.toml"; exit 1; }
lock="$(sha256sum "$src/Cargo.lock" | cut -c1-16)"
sources="$(cd "$src" && find Cargo.toml build.rs rust-toolchain.toml src -type f -print0 | sort -z |
  xargs -0 sha256sum | sha256sum | cut -c1-16)"
os="${RUNNER_OS:-Linux}-${RUNNER_ARCH:-X64}"
base="${RUNNER_TOOL_CACHE:-${RUNNER_TEMP:?}}/acode-run"
{
  echo "key=acode-run-$os-rust-$channel-lock-$lock-src-$sources"
  echo "restore-key=acode-run-$os-rust-$channel-lock-$lock-"
  echo "dir=$base/build"
} >> "$GITHUB_OUTPUT"
echo "acode-run: toolchain $channel, Cargo.lock $lock, sources $sources"

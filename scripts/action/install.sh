#!/usr/bin/env bash
# Installs acode-run from the action's own checkout with the toolchain its rust-toolchain.toml
# pins (cargo runs inside the checkout, so rustup takes the pin; the build refuses an older
# compiler anyway: build.rs). A binary the cache restored for exactly this key is used as it is.
# Adds the binary's directory to $GITHUB_PATH.
set -euo pipefail
dir="${ACODE_DIR:?}"
key="${ACODE_KEY:?}"
bin="$dir/bin/acode-run"
start=$SECONDS
if [ -x "$bin" ] && [ "$(cat "$dir/bin/.key" 2>/dev/null)" = "$key" ]; then
  echo "acode-run: cached build for $key"
else
  command -v rustup >/dev/null 2>&1 || {
    echo "::error title=acode-run::rustup is not installed on this runner: the action builds acode-run with the toolchain rust-toolchain.toml pins (GitHub's ubuntu runners have rustup; elsewhere install it, or use the acode-run image: docs/ci.md)"
    exit 1
  }
  cd "${GITHUB_ACTION_PATH:?}"
  rustup toolchain install
  mkdir -p "$dir"
  # The target directory lives in the cached directory, so a job whose sources changed (the
  # cache restored by toolchain and Cargo.lock) rebuilds only acode-run itself.
  CARGO_TARGET_DIR="$dir/target" cargo install --locked --force --path . --root "$dir" --bin acode-run
  echo "$key" > "$dir/bin/.key"
  echo "acode-run: built in $((SECONDS - start)) s"
fi
echo "$dir/bin" >> "$GITHUB_PATH"
"$bin" --version

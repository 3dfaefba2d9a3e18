#!/usr/bin/env bash
# Builds acode-run and runs plans/hello.json end to end over a fresh copy of fixtures/hello.
# The plan's approval (plans/hello.json.approval) is committed next to it, as a reviewed plan would be.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "building acode-run (release; the first build takes a few minutes, later ones seconds)..." >&2
# The toolchain rust-toolchain.toml names (a no-op when it is installed; see that file for why).
command -v rustup >/dev/null 2>&1 && rustup toolchain install >/dev/null
cargo build --release
ws=$(mktemp -d "${TMPDIR:-/tmp}/acode-hello.XXXXXX")
cp -R fixtures/hello/. "$ws"
echo "workspace: $ws"
echo
echo "what the plan will do (acode-run preview):"
target/release/acode-run preview plans/hello.json --workspace "$ws"
echo
status=0
target/release/acode-run run plans/hello.json --workspace "$ws" "$@" || status=$?
echo
echo "the run is recorded in $ws/.acode/executions.db; look at it with:"
echo "  target/release/acode-run runs --workspace $ws"
echo "  target/release/acode-run show --workspace $ws <RUN_ID>"
exit "$status"

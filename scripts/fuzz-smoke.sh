#!/usr/bin/env bash
# The fuzz targets as a regression smoke (docs/fuzzing.md): build every target in one
# `cargo fuzz build`, then run each over its committed corpus for a fixed number of runs; any
# crash, hang (the targets' own deadlines), leak or broken property fails. Installs cargo-fuzz
# (from crates.io, through cargo) and the nightly toolchain when missing.
#
#   scripts/fuzz-smoke.sh            # all targets
#   scripts/fuzz-smoke.sh plan proxy # some
#   FUZZ_RUNS=2000 scripts/fuzz-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

# Sanitizer: none by default. AddressSanitizer finds nothing in safe Rust that a panic does not
# already report, and doubles the build (SQLite and ring's C code) and halves the speed; the
# acode-run code under test has no `unsafe` in these parsers. FUZZ_SANITIZER=address for a long run.
sanitizer="${FUZZ_SANITIZER:-none}"
# Unoptimised (`--dev`) by default: a few hundred runs per target need no speed, and the build is
# what takes the time (docs/fuzzing.md has the measurements). FUZZ_PROFILE=release for speed.
profile=()
[ "${FUZZ_PROFILE:-dev}" = dev ] && profile=(--dev)
runs="${FUZZ_RUNS:-300}"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

start=$(date +%s)
cargo +nightly fuzz build "${profile[@]}" -s "$sanitizer"
built=$(date +%s)
echo "fuzz-smoke: built all targets in $((built - start)) s (sanitizer: $sanitizer)"

dict_for() {
  case "$1" in
    mcp_server | mcp_client) echo dict/jsonrpc.dict ;;
    proxy) echo dict/http.dict ;;
    plan | policy | approval | odincode | skill | attestation) echo dict/plan.dict ;;
    store_rows) echo dict/store.dict ;;
    replay_file) echo dict/replay.dict ;;
    *) echo "" ;;
  esac
}

# The targets' scratch directories (acode_run_fuzz::scratch, under TMPDIR) go in a directory of
# this smoke's own, removed at the end: a sweep of every `acode-fuzz-*` would pull the scratch
# directory from under a long run going on beside it.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/acode-fuzz-smoke-scratch.XXXXXX")
failed=()
for t in "${targets[@]}"; do
  dict=$(dict_for "$t")
  # A copy of the corpus: libFuzzer adds what it finds to its first corpus directory, and the
  # committed corpus stays as reviewed.
  work=$(mktemp -d "${TMPDIR:-/tmp}/acode-fuzz-smoke-$t.XXXXXX")
  cp -r "corpus/$t/." "$work/"
  args=(-runs="$runs" -max_total_time=30 -timeout=30 -rss_limit_mb=2048 -print_final_stats=1)
  [ -n "$dict" ] && args+=(-dict="$dict")
  t0=$(date +%s)
  if TMPDIR="$scratch" cargo +nightly fuzz run "${profile[@]}" -s "$sanitizer" "$t" "$work" -- "${args[@]}" >"$work.log" 2>&1; then
    echo "fuzz-smoke: $t ok ($(($(date +%s) - t0)) s, $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work.log" | grep -o '[0-9]*$') runs)"
  else
    echo "fuzz-smoke: $t FAILED; the end of its log:"
    tail -n 40 "$work.log"
    failed+=("$t")
  fi
  rm -rf "$work" "$work.log"
done
rm -rf "$scratch"
echo "fuzz-smoke: $(($(date +%s) - start)) s in all"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz-smoke: failed: ${failed[*]}"
  exit 1
fi

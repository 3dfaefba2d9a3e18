#!/usr/bin/env bash
# The core of the trust core, every mutant (issue 47, docs/testing.md "The full run"): each file's
# mutants against the unit tests of its module first, then the survivors against the end-to-end
# tests of its area (cargo mutants --iterate skips those already caught). In place (the tree is
# restored after each mutant), one at a time, niced, with a timeout; results in
# mutants.out.d/core/NAME/mutants.out/{caught,missed,unviable,timeout}.txt.
#
# Usage: scripts/mutants-core.sh [--unit-only] [FILE...]   (default: every file below)
# Hours on two shared cores: run it in the background (nohup ... &) and read the results later.
set -euo pipefail
cd "$(dirname "$0")/.."
# The filters are several words on purpose (libtest takes several).
# shellcheck disable=SC2046
# shellcheck source=scripts/mutants-common.sh
source scripts/mutants-common.sh

# The core of the core (docs/testing.md): every mutant of these must be caught or justified.
CORE=(src/plan/auth.rs src/plan/signers.rs src/attest/dsse.rs src/attest/keys.rs
  src/attest/verify.rs src/attest/mod.rs src/mcp/pins.rs src/redact.rs src/net/proxy.rs
  src/workspace/guard.rs)

unit_only=0
files=()
for a in "$@"; do
  case "$a" in
    --unit-only) unit_only=1 ;;
    -*) echo "mutants-core: unknown option $a" >&2; exit 2 ;;
    *) files+=("$a") ;;
  esac
done
[ "${#files[@]}" -gt 0 ] || files=("${CORE[@]}")

status=0
for file in "${files[@]}"; do
  out="mutants.out.d/core/$(echo "$file" | sed 's|^src/||; s|[/.]|_|g')"
  mkdir -p "$out/cli"
  started=$SECONDS
  unit_tests_only
  echo "mutants-core: $file: unit tests $(unit_filter_of "$file") ($(date -u +%FT%TZ))"
  rc=0
  nice -n 10 cargo mutants --in-place --baseline=skip --timeout 180 --no-shuffle --iterate \
    -f "$file" -o "$out" "${UNIT_CARGO_ARGS[@]}" -- -- $(unit_filter_of "$file") || rc=$?
  all_test_targets
  echo "mutants-core: $file: unit pass exit $rc after $((SECONDS - started)) s"
  if [ "$rc" = 2 ] && [ "$unit_only" = 0 ]; then
    missed="$(names_regex <"$out/mutants.out/missed.txt")"
    echo "mutants-core: $file: $(wc -l <"$out/mutants.out/missed.txt") survived; end-to-end tests $(cli_filter_of "$file")"
    rc=0
    nice -n 10 cargo mutants --in-place --baseline=skip --timeout 900 --no-shuffle \
      -f "$file" --re "$missed" -o "$out/cli" -C --test -C cli -- -- $(cli_filter_of "$file") || rc=$?
    echo "mutants-core: $file: end-to-end pass exit $rc after $((SECONDS - started)) s"
  fi
  case "$rc" in
    0 | 2 | 3) [ "$rc" = 2 ] && status=1 ;;
    *) echo "mutants-core: cargo mutants failed ($rc) on $file" >&2; exit "$rc" ;;
  esac
done
exit "$status"

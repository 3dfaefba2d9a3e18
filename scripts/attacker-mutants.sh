#!/usr/bin/env bash
# Mutants cargo-mutants does not generate but an attacker would (issue 47, docs/testing.md): each
# scripts/attacker-mutants/NAME.patch is one small edit of the trust core — a field dropped from a
# signed message, a namespace or validity check removed, a path check bypassed, a redaction skipped,
# a refusal turned into a warning, a pin compared by name only, the proxy's header stripping gone.
# Its header names why it matters and the narrow tests that must fail with it:
#   # test: unit --lib plan::auth::tests::NAME      (a unit test: cheap, CI runs these)
#   # test: cli --test cli approval::ssh::NAME      (an end-to-end test through the binary)
#
# For each patch: the tests are run unmutated first (they must pass: a test that fails anyway
# proves nothing), then the patch is applied to the working tree, each test is built (a patch
# that no longer compiles is an error: fix the entry) and run, and must fail; then the files are
# put back from a copy taken before — also on failure, Ctrl-C or a kill (trap). A patch that no
# longer applies (the code moved) is an error too, so the list cannot rot silently.
#
# Usage: scripts/attacker-mutants.sh [--quick] [--list] [NAME...]
#   --quick  only the unit-level tests (entries with none are skipped, and say so)
#   --list   print the entries and their tests, run nothing
# Exits 0 when every mutant run was killed by every test named for it; 1 when one survived, an
# entry is broken or a test fails unmutated.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=scripts/attacker-mutants
quick=0
list=0
names=()
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    --list) list=1 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "attacker-mutants: unknown option $a" >&2; exit 2 ;;
    *) names+=("$a") ;;
  esac
done
if [ "${#names[@]}" -eq 0 ]; then
  for p in "$dir"/*.patch; do names+=("$(basename "$p" .patch)"); done
fi

# The test lines of a patch at the level asked for: "LEVEL CARGO-ARGS... FILTER".
tests_of() {
  sed -n 's/^# test: //p' "$dir/$1.patch" | while read -r level rest; do
    if [ "$quick" = 0 ] || [ "$level" = unit ]; then echo "$level $rest"; fi
  done
}
# The files a patch changes.
files_of() { sed -n 's|^+++ b/||p' "$dir/$1.patch"; }

for n in "${names[@]}"; do
  [ -f "$dir/$n.patch" ] || { echo "attacker-mutants: no entry $n ($dir/$n.patch)" >&2; exit 2; }
done
if [ "$list" = 1 ]; then
  for n in "${names[@]}"; do
    echo "$n: $(files_of "$n" | tr '\n' ' ')"
    tests_of "$n" | sed 's/^/  /'
  done
  exit 0
fi

# shellcheck source=scripts/mutants-common.sh
source scripts/mutants-common.sh
# Backups of the files being mutated, restored whatever happens (and Cargo.toml, see
# mutants-common.sh).
backup="$(mktemp -d)"
restore() {
  if [ -f "$backup/manifest" ]; then
    # A fresh modification time (no `cp -p`): cargo decides what to rebuild by it, and a file
    # put back with its old time would leave the mutated build in target/ for the next command.
    while read -r f; do cp "$backup/files/$f" "$f"; done <"$backup/manifest"
    rm -f "$backup/manifest"
  fi
}
cleanup() { restore; rm -rf "$backup"; }
MUTANTS_EXIT_HOOK=cleanup
trap _mutants_exit EXIT
trap 'exit 130' INT TERM

# cargo test ARGS, niced, its output kept in $1 for the report. The unit tests run without the
# crate's dev-dependency on itself (mutants-common.sh), so they need the feature given.
cargo_test() {
  local out="$1"
  shift
  nice -n 10 cargo test "$@" >"$out" 2>&1
}
split() { # "LEVEL ARGS... FILTER" -> level in $level, cargo args in $args, filter in $filter
  local -a w
  read -r -a w <<<"$1"
  level="${w[0]}"
  filter="${w[${#w[@]}-1]}"
  args=("${w[@]:1:${#w[@]}-2}")
  if [ "$level" = unit ]; then args+=(--features testing); fi
}

status=0
declare -a report
levels=(unit)
[ "$quick" = 1 ] || levels+=(cli)
for want in "${levels[@]}"; do
  if [ "$want" = unit ]; then unit_tests_only; else all_test_targets; fi
  # 1. Every test named at this level, unmutated, must pass (one run per cargo target).
  declare -A by_target=()
  for n in "${names[@]}"; do
    while read -r line; do
      [ -n "$line" ] || continue
      split "$line"
      [ "$level" = "$want" ] || continue
      by_target["${args[*]}"]+=" $filter"
    done < <(tests_of "$n")
  done
  for key in "${!by_target[@]}"; do
    read -r -a targs <<<"$key"
    read -r -a filters <<<"${by_target[$key]}"
    log="$backup/control.log"
    if ! cargo_test "$log" "${targs[@]}" -- --exact "${filters[@]}"; then
      echo "attacker-mutants: the tests fail WITHOUT any mutant (cargo test $key):" >&2
      grep -E '^test .* FAILED|panicked|^error' "$log" | head -20 >&2
      exit 1
    fi
    for f in "${filters[@]}"; do
      grep -q "^test $f \.\.\. ok" "$log" || {
        echo "attacker-mutants: cargo test $key has no test $f (renamed? update the entry)" >&2
        exit 1
      }
    done
  done
  unset by_target

  # 2. Each mutant, each of its tests at this level.
  for n in "${names[@]}"; do
    mapfile -t lines < <(tests_of "$n")
    mine=()
    for line in "${lines[@]}"; do
      split "$line"
      [ "$level" != "$want" ] || mine+=("$line")
    done
    if [ "${#mine[@]}" -eq 0 ]; then
      [ "$want" != unit ] || [ "$quick" = 0 ] ||
        report+=("$n|-|skipped (no unit-level test; run without --quick)|0")
      continue
    fi
    mkdir -p "$backup/files"
    : >"$backup/manifest"
    while read -r f; do
      mkdir -p "$backup/files/$(dirname "$f")"
      cp -p "$f" "$backup/files/$f"
      echo "$f" >>"$backup/manifest"
    done < <(files_of "$n")
    if ! git apply --check "$dir/$n.patch" 2>"$backup/apply.log"; then
      report+=("$n|-|BROKEN: the patch no longer applies ($(head -1 "$backup/apply.log"))|0")
      status=1
      restore
      continue
    fi
    git apply "$dir/$n.patch"
    for line in "${mine[@]}"; do
      split "$line"
      started=$SECONDS
      log="$backup/$n.log"
      if ! cargo_test "$log" --no-run "${args[@]}"; then
        report+=("$n|$filter|BROKEN: the mutant does not compile|$((SECONDS - started))")
        status=1
        continue
      fi
      if cargo_test "$log" "${args[@]}" -- --exact "$filter"; then
        report+=("$n|$filter|SURVIVED|$((SECONDS - started))")
        status=1
      else
        report+=("$n|$filter|killed|$((SECONDS - started))")
      fi
    done
    restore
  done
done
all_test_targets

printf '%-34s %-9s %5s  %s\n' "mutant" "result" "secs" "test"
for r in "${report[@]}"; do
  IFS='|' read -r n t res secs <<<"$r"
  printf '%-34s %-9s %5s  %s\n' "$n" "${res%% *}" "$secs" "$t"
  case "$res" in killed | SURVIVED) ;; *) echo "    $res" ;; esac
done
if [ "$status" != 0 ]; then
  echo "attacker-mutants: a hand-made mutant survived or an entry is broken (see above)" >&2
fi
exit "$status"

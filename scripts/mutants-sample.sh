#!/usr/bin/env bash
# A seeded random sample of the mutants of the rest of the trust core (issue 47, docs/testing.md):
# src/workspace/, src/sandbox/, src/process/, src/policy/, src/plan/parse.rs,
# src/plan/validate.rs, and the approval path of src/runner/ (authorize, trust,
# authorization_for/_under, standing_rejection, decision_for, record_decision, and
# src/runner/signing.rs). Running every one of their ~2 000 mutants against the whole suite is
# days on two cores; a sample of a few hundred, drawn anew with another seed each time, says how
# strong the tests are and finds what they miss.
#
# Usage: scripts/mutants-sample.sh [--seed S] [--count N] [--list] [--out DIR] [--targets ARGS]
#                                  [-- TEST-FILTERS]
#   --seed S    the sample's seed (default: today's date, YYYYMMDD); docs/testing.md records the
#               seeds used so far, so the next sample is a different one
#   --count N   how many mutants (default 200)
#   --list      print the sample's names and stop
#   --out DIR   cargo mutants' output directory (default mutants.out.d/sample-SEED)
#   --targets   which test targets cargo builds and runs for each mutant (default `--lib`, the
#               unit tests); `--targets '--test cli'` with `-- sandbox::` after it for a second
#               pass over the survivors (CARGO_MUTANTS_EXTRA=--iterate skips those caught before)
#   after --:   test name filters (default: the unit tests of each file's module, or with
#               --targets '--test cli' the end-to-end tests of its area; scripts/mutants-common.sh)
# The mutants are tested in place (cargo mutants --in-place: the tree is restored after each),
# one at a time, niced, with a timeout; the counts are in DIR/mutants.out/{caught,missed,...}.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/mutants-common.sh
source scripts/mutants-common.sh

seed="$(date -u +%Y%m%d)"
count=200
list=0
out=""
targets="--lib"
filters=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --list) list=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    --) shift; filters=("$@"); break ;;
    *) echo "mutants-sample: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="mutants.out.d/sample-$seed"

files=(-f 'src/workspace/**' -f 'src/sandbox/**' -f 'src/process/**' -f 'src/policy/**'
  -f src/plan/parse.rs -f src/plan/validate.rs -f src/runner/mod.rs -f src/runner/signing.rs)

# Every mutant of those files (after .cargo/mutants.toml's exclusions), as JSON; then the sample.
mkdir -p "$out"
all="$out/all.json"
cargo mutants --list --json "${files[@]}" >"$all"
sample="$(python3 - "$all" "$seed" "$count" <<'EOF'
import json, random, re, sys
path, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
# The approval path of src/runner/mod.rs; the rest of the runner is not trust core.
RUNNER = {"authorize", "trust", "authorization_for", "authorization_under",
          "standing_rejection", "decision_for", "record_decision"}
names = []
for m in json.load(open(path)):
    if m["file"] == "src/runner/mod.rs":
        f = (m.get("function") or {}).get("function_name", "")
        if f.split("::")[-1] not in RUNNER:
            continue
    names.append(m["name"])
names.sort()
rng = random.Random(seed)
picked = sorted(rng.sample(names, min(count, len(names))))
print(f"# {len(picked)} of {len(names)} mutants, seed {seed}", file=sys.stderr)
print("\n".join(picked))
EOF
)"
if [ "$list" = 1 ]; then
  echo "$sample"
  exit 0
fi

printf '%s\n' "$sample" >"$out/sample.txt"
# Exactly those, one cargo mutants run per file (one anchored --re per name), each against the
# unit tests of the file's module unless filters are given.
cargo_args=()
if [ "$targets" = --lib ]; then
  unit_tests_only
  cargo_args=("${UNIT_CARGO_ARGS[@]}")
else
  for a in $targets; do cargo_args+=(-C "$a"); done
fi
status=0
for file in $(printf '%s\n' "$sample" | sed 's/:.*//' | sort -u); do
  regex="$(printf '%s\n' "$sample" | grep -F "$file:" | names_regex)"
  dir="$out/$(echo "$file" | sed 's|^src/||; s|[/.]|_|g')"
  mkdir -p "$dir"
  if [ "${#filters[@]}" -gt 0 ]; then
    tests=("${filters[@]}")
  elif [ "$targets" = --lib ]; then
    read -r -a tests <<<"$(unit_filter_of "$file")"
  else
    read -r -a tests <<<"$(cli_filter_of "$file")"
  fi
  echo "mutants-sample: $file: $(grep -cF "$file:" <<<"$sample") mutant name(s), tests ${tests[*]}"
  rc=0
  # shellcheck disable=SC2086 # CARGO_MUTANTS_EXTRA is a list of flags
  nice -n 10 cargo mutants --in-place --baseline=skip --timeout 300 --no-shuffle \
    ${CARGO_MUTANTS_EXTRA:-} -f "$file" --re "$regex" -o "$dir" \
    "${cargo_args[@]}" -- -- "${tests[@]}" || rc=$?
  case "$rc" in 0 | 2 | 3) [ "$rc" != 2 ] || status=2 ;; *) exit "$rc" ;; esac
done
# The totals over every file.
for kind in caught missed unviable timeout; do
  printf '%s %s\n' "$kind" "$(cat "$out"/*/mutants.out/$kind.txt 2>/dev/null | wc -l)"
done | tee "$out/totals.txt"
exit "$status"

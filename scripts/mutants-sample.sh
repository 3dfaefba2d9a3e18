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
#   after --:   test name filters given to cargo test
# The mutants are tested in place (cargo mutants --in-place: the tree is restored after each),
# one at a time, niced, with a timeout; the counts are in DIR/mutants.out/{caught,missed,...}.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

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
all="$(mktemp)"
trap 'rm -f "$all"' EXIT
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

# Exactly those: one anchored regex per name.
regex="$(printf '%s\n' "$sample" | python3 -c '
import re, sys
print("|".join("^" + re.escape(l.rstrip("\n")) + "$" for l in sys.stdin if l.strip()))')"
mkdir -p "$out"
printf '%s\n' "$sample" >"$out/sample.txt"
cargo_args=()
for a in $targets; do cargo_args+=(-C "$a"); done
# shellcheck disable=SC2086 # CARGO_MUTANTS_EXTRA is a list of flags
nice -n 10 cargo mutants --in-place --baseline=skip --timeout 300 --no-shuffle \
  ${CARGO_MUTANTS_EXTRA:-} "${files[@]}" --re "$regex" -o "$out" \
  "${cargo_args[@]}" -- "${filters[@]}"

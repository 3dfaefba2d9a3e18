#!/usr/bin/env bash
# CI's mutation check (issue 47, docs/testing.md "In CI"): the mutants cargo-mutants makes of the
# trust-core lines a change touches must each be caught by a test. Fails on a missed one that is
# not listed as equivalent in .cargo/mutants.toml.
#
# The change: `git diff BASE` (the committed change and anything not yet committed), BASE being
#   $ACODE_MUTANTS_BASE when set, else the first parent of HEAD. CI runs on a fresh clone of main
#   whose HEAD is the merge (or commit) being submitted: its first parent is main as it was
#   before, so the diff is exactly what the submission brings. On a branch, set
#   ACODE_MUTANTS_BASE=$(git merge-base HEAD main) to check the whole branch.
# Bounded: at most $ACODE_MUTANTS_CAP mutants (default 8). A change with more is checked on a
#   sample of that many, drawn with the HEAD commit as the seed (a rerun draws the same ones),
#   and says so; the rest is the full run's job (docs/testing.md).
# Two passes, cheapest first: each mutant against the unit tests of its module (`cargo test
#   --lib MODULE::`), then the ones that survive against the end-to-end tests of its area
#   (`cargo test --test cli AREA::`, cargo mutants --iterate).
#
# Usage: scripts/mutants-diff.sh [--list]   (--list: say what would run, run nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
# The filters are several words on purpose (libtest takes several).
# shellcheck disable=SC2046
# shellcheck source=scripts/mutants-common.sh
source scripts/mutants-common.sh

list=0
[ "${1:-}" = --list ] && list=1
cap="${ACODE_MUTANTS_CAP:-8}"

# The trust core (docs/testing.md): the files whose mutants must be caught.
core=(src/plan/auth.rs src/plan/signers.rs src/attest src/mcp/pins.rs src/redact.rs
  src/net/proxy.rs src/workspace src/sandbox src/process src/policy src/plan/parse.rs
  src/plan/validate.rs src/runner/signing.rs)

base="${ACODE_MUTANTS_BASE:-}"
if [ -z "$base" ]; then
  if ! base="$(git rev-parse --verify --quiet 'HEAD^1')"; then
    echo "mutants-diff: HEAD has no parent in this clone (a root commit or a shallow clone): nothing to compare; skipped" >&2
    exit 0
  fi
fi
out=mutants.out.d/diff
mkdir -p "$out"
diff="$out/change.diff"
git diff "$base" -- "${core[@]}" >"$diff"
if [ ! -s "$diff" ]; then
  echo "mutants-diff: the change ($(git rev-parse --short "$base")..working tree) touches no trust-core file"
  exit 0
fi
echo "mutants-diff: trust-core files changed since $(git rev-parse --short "$base"):"
git diff --stat "$base" -- "${core[@]}" | sed 's/^/  /'

# cargo-mutants itself, the version docs/testing.md's numbers were made with, when missing (a
# few minutes of compiling on a fresh machine, so only when there is something to mutate).
if ! cargo mutants --version >/dev/null 2>&1; then
  echo "mutants-diff: installing cargo-mutants $CARGO_MUTANTS_VERSION"
  nice -n 10 cargo install --locked "cargo-mutants@$CARGO_MUTANTS_VERSION"
fi
listed="$out/listed.json"
cargo mutants --list --json --in-diff "$diff" >"$listed"
picked="$out/picked.txt"
python3 - "$listed" "$cap" "$(git rev-parse HEAD)" >"$picked" <<'EOF'
import json, random, sys
path, cap, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# cargo mutants prints nothing at all (not `[]`) when the changed lines hold no mutant (test code,
# comments, constants it does not mutate).
text = open(path).read().strip()
names = sorted(m["name"] for m in json.loads(text)) if text else []
if len(names) > cap:
    print(f"mutants-diff: {len(names)} mutants in the change, more than the cap of {cap}: "
          f"checking a sample of {cap} (seed {seed[:12]})", file=sys.stderr)
    names = sorted(random.Random(seed).sample(names, cap))
else:
    print(f"mutants-diff: {len(names)} mutant(s) in the change", file=sys.stderr)
print("\n".join(names))
EOF
if [ ! -s "$picked" ] || [ -z "$(tr -d '\n' <"$picked")" ]; then
  echo "mutants-diff: no mutants in the changed lines"
  exit 0
fi
sed 's/^/  /' "$picked"
[ "$list" = 1 ] && exit 0

status=0
# One cargo mutants run per file, so each gets its own test filters.
for file in $(sed 's/:.*//' "$picked" | sort -u); do
  regex="$(grep -F "$file:" "$picked" | names_regex)"
  dir="$out/$(echo "$file" | sed 's|^src/||; s|[/.]|_|g')"
  mkdir -p "$dir/cli"
  echo "mutants-diff: $file: unit tests $(unit_filter_of "$file")"
  unit_tests_only
  rc=0
  nice -n 10 cargo mutants --in-place --baseline=skip --timeout 180 --no-shuffle \
    -f "$file" --re "$regex" -o "$dir" "${UNIT_CARGO_ARGS[@]}" -- -- $(unit_filter_of "$file") || rc=$?
  all_test_targets
  case "$rc" in
    0 | 3) continue ;; # all caught (3: some timed out, which a test run notices too)
    2) ;;              # missed: try the end-to-end tests
    *) echo "mutants-diff: cargo mutants failed ($rc) on $file" >&2; status=1; continue ;;
  esac
  echo "mutants-diff: $file: $(wc -l <"$dir/mutants.out/missed.txt") survived the unit tests; end-to-end tests $(cli_filter_of "$file")"
  regex="$(names_regex <"$dir/mutants.out/missed.txt")"
  rc=0
  nice -n 10 cargo mutants --in-place --baseline=skip --timeout 600 --no-shuffle \
    -f "$file" --re "$regex" -o "$dir/cli" -C --test -C cli -- -- $(cli_filter_of "$file") || rc=$?
  case "$rc" in
    0 | 3) ;;
    2)
      echo "mutants-diff: MISSED in $file (no test fails with it; kill it with a test, or list it" \
        "as equivalent in .cargo/mutants.toml and docs/testing.md):" >&2
      sed 's/^/  /' "$dir/cli/mutants.out/missed.txt" >&2
      status=1
      ;;
    *) echo "mutants-diff: cargo mutants failed ($rc) on $file" >&2; status=1 ;;
  esac
done
exit "$status"

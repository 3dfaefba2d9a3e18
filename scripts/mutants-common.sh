# Sourced by the mutation scripts (scripts/mutants-*.sh, docs/testing.md); not run on its own.
#
# unit_tests_only / all_test_targets: a mutant tested against the unit tests alone needs only the
# library's test harness rebuilt, but the crate's dev-dependency on itself (`acode_run = { path =
# ".", features = ["testing"] }`, for the integration tests) makes cargo rebuild the library a
# second time, as that dependency, for every mutant: half of each build. unit_tests_only comments
# that line out of Cargo.toml (the unit tests then get the feature from `--features testing`,
# see UNIT_CARGO_ARGS) and all_test_targets puts Cargo.toml and Cargo.lock back byte for byte;
# an EXIT trap set by unit_tests_only puts them back whatever happens.

UNIT_CARGO_ARGS=(-C --lib -C --features=testing)
# The cargo-mutants release the scores in docs/testing.md were measured with.
CARGO_MUTANTS_VERSION=27.1.0
_mutants_saved=""

unit_tests_only() {
  [ -z "$_mutants_saved" ] || return 0
  _mutants_saved="$(mktemp -d)"
  cp -p Cargo.toml Cargo.lock "$_mutants_saved/"
  trap _mutants_exit EXIT
  trap 'exit 130' INT TERM
  grep -q '^acode_run = { path = "\.", features = \["testing"\] }$' Cargo.toml || {
    echo "mutants: Cargo.toml has no dev-dependency line acode_run = { path = \".\", ... } to set aside" >&2
    return 1
  }
  sed -i 's/^acode_run = { path = "\.", features = \["testing"\] }$/# &/' Cargo.toml
}

# What the EXIT trap does: Cargo.toml back, then the caller's own clean-up ($MUTANTS_EXIT_HOOK).
_mutants_exit() {
  all_test_targets
  [ -z "${MUTANTS_EXIT_HOOK:-}" ] || "$MUTANTS_EXIT_HOOK"
}

all_test_targets() {
  [ -n "$_mutants_saved" ] || return 0
  cp -p "$_mutants_saved/Cargo.toml" "$_mutants_saved/Cargo.lock" .
  rm -rf "$_mutants_saved"
  _mutants_saved=""
}

# The unit tests of a trust-core file's module (`cargo test --lib FILTER...`: libtest takes
# several filters), and the end-to-end
# tests of its area (`cargo test --test cli FILTER...`, tests/cli/; never the container or
# registry suites, which take minutes a test): the narrow tests a mutant of that file is run
# against, cheapest first.
unit_filter_of() {
  case "$1" in
    src/plan/auth.rs | src/plan/signers.rs) echo plan::auth plan::signers ;;
    src/plan/*) echo plan:: ;;
    src/attest/*) echo attest:: ;;
    src/mcp/pins.rs) echo mcp::pins tools::mcp ;;
    src/mcp/*) echo mcp:: ;;
    src/redact.rs) echo redact:: store:: ;;
    src/net/*) echo net:: ;;
    src/workspace/*) echo workspace:: ;;
    src/sandbox/*) echo sandbox:: ;;
    src/process/*) echo process:: ;;
    src/policy/*) echo policy:: ;;
    src/runner/*) echo runner:: plan::auth ;;
    *) echo "" ;;
  esac
}
cli_filter_of() {
  case "$1" in
    src/plan/signers.rs) echo approval::ssh ;;
    src/attest/*) echo approval::attest ;;
    src/plan/auth.rs | src/runner/*) echo approval:: ;;
    src/mcp/*) echo mcp::stdio ;;
    src/redact.rs) echo output::secrets ;;
    src/net/*) echo sandbox::network ;;
    src/workspace/*) echo sandbox::escape sandbox::race sandbox::git_attacks ;;
    src/sandbox/*) echo sandbox::bwrap_attacks sandbox::escape sandbox::landlock sandbox::fallback ;;
    src/process/*) echo sandbox::supervisor run::commands ;;
    src/policy/*) echo sandbox::programs sandbox::credentials sandbox::git_credentials sandbox::network ;;
    src/plan/*) echo plan:: ;;
    *) echo "" ;;
  esac
}

# One anchored alternative per mutant name read from stdin: exactly those for --re.
names_regex() {
  python3 -c '
import re, sys
print("|".join("^" + re.escape(l.rstrip("\n")) + "$" for l in sys.stdin if l.strip()))'
}

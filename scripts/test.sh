#!/usr/bin/env bash
# The test suite with its own set-up (the README's test command; .ci/run calls it too): installs
# what the tests need where it can (as root, with apt-get), then runs `cargo test` with any
# arguments given. A test that needs a tool this machine still lacks fails naming it; a test that
# cannot run here (a kernel feature missing) is a named skip, counted and listed at the end, and a
# failure when CI is set.
set -euo pipefail
cd "$(dirname "$0")/.."

# command the tests run -> the Debian package that provides it.
declare -A provides=(
  [bwrap]=bubblewrap
  [git]=git
  [node]=nodejs
  [python3]=python3
  [openssl]=openssl
  [setpriv]=util-linux
  [strace]=strace
  # Approvals signed with SSH keys and attestations (tests/cli/approval/ssh.rs, attest.rs).
  [ssh-keygen]=openssh-client
  [ssh-agent]=openssh-client
)
# chromium renders the HTML report in tests/cli/output/report.rs.
provides[chromium]=chromium
if [ "${ACODE_E2E_NET:-}" = 1 ]; then
  provides[npm]=npm
  # gitlab-ci-local copies a job's files with rsync (tests/cli/pipeline/gitlab.rs).
  provides[rsync]=rsync
fi
# The containment suite in real containers (tests/cli/sandbox/container.rs) is opt-in.
if [ "${ACODE_E2E_CONTAINER:-}" = 1 ]; then
  provides[podman]=podman
  provides[runc]=runc
  provides[debootstrap]=debootstrap
  # scripts/image.sh builds the static (musl) acode-run with musl-gcc for the C it compiles.
  provides[musl-gcc]=musl-tools
fi
missing=()
for cmd in "${!provides[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("${provides[$cmd]}")
done
# `python3 -m venv` needs its own package on Debian.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "scripts/test.sh: missing ${missing[*]} and cannot install (needs root and apt-get);" \
      "the tests that need them fail naming them" >&2
  fi
fi

skips="$(mktemp)"
trap 'rm -f "$skips"' EXIT
export ACODE_TEST_SKIP_LOG="$skips"
status=0
# The toolchain rust-toolchain.toml names (a no-op when it is installed; see that file for why).
command -v rustup >/dev/null 2>&1 && rustup toolchain install >/dev/null
cargo test "$@" || status=$?
if [ -s "$skips" ]; then
  echo "scripts/test.sh: $(wc -l <"$skips") test(s) skipped on this machine (they fail when CI is set):" >&2
  sed 's/^/  /' "$skips" >&2
fi
exit "$status"

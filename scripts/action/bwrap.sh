#!/usr/bin/env bash
# Makes bubblewrap usable where the action may: installs it when missing (root or passwordless
# sudo, apt-get), and on a host whose AppArmor restricts unprivileged user namespaces (Ubuntu 23.10
# and later: GitHub's ubuntu-24.04 runners) loads the narrow profile of docs/ci.md that lets
# /usr/bin/bwrap, and nothing else, create one — never the system-wide sysctl. Where it may not
# (no privilege, a container, no AppArmor tools) it changes nothing and says so: `auto` then falls
# back to Landlock, which the next step's `doctor` and the run header name with the reason.
set -euo pipefail
case "${ACODE_SANDBOX:-auto}" in
  auto | bwrap) ;;
  *) echo "acode-run: sandbox ${ACODE_SANDBOX}: bubblewrap not needed"; exit 0 ;;
esac

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
  else return 1
  fi
}
may_change_host=true
if [ -e /.dockerenv ] || [ -e /run/.containerenv ]; then
  may_change_host=false
fi

if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && as_root true; then
    echo "acode-run: installing bubblewrap"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null ||
      { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } ||
      echo "::warning title=acode-run::bubblewrap could not be installed; auto falls back to Landlock"
  else
    echo "::notice title=acode-run::no bwrap here and no privilege to install it; auto falls back to Landlock"
  fi
fi

restrict=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
profile=/etc/apparmor.d/bwrap
if [ "$(cat "$restrict" 2>/dev/null || echo 0)" = 1 ] && [ -x /usr/bin/bwrap ]; then
  if ! $may_change_host; then
    echo "::notice title=acode-run::AppArmor restricts user namespaces, and this is a container: the host's profile cannot be changed from here"
  elif ! command -v apparmor_parser >/dev/null 2>&1 || ! as_root true; then
    echo "::notice title=acode-run::AppArmor restricts user namespaces and the profile for bwrap cannot be loaded here (needs apparmor_parser and root or passwordless sudo); auto falls back to Landlock"
  elif as_root grep -qs 'userns' "$profile" 2>/dev/null; then
    echo "acode-run: $profile already allows bwrap user namespaces"
  else
    printf '%s\n' 'abi <abi/4.0>,' 'include <tunables/global>' \
      'profile bwrap /usr/bin/bwrap flags=(unconfined) {' '  userns,' \
      '  include if exists <local/bwrap>' '}' | as_root tee "$profile" >/dev/null
    as_root apparmor_parser -r "$profile"
    echo "acode-run: loaded $profile (bwrap only may create user namespaces)"
  fi
fi
if command -v bwrap >/dev/null 2>&1; then
  bwrap --unshare-all --ro-bind / / --proc /proc --dev /dev true 2>&1 &&
    echo "acode-run: bwrap works" ||
    echo "acode-run: bwrap does not start here; acode-run doctor says why"
fi

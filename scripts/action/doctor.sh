#!/usr/bin/env bash
# What the sandbox holds on this runner, in the job's log before the plan runs (`acode-run
# doctor`). Fails only when nothing can be checked (no /proc: exit 1); the promises the job
# requires are checked by the run itself (--require), which then writes its refusal to the reports.
set -euo pipefail
echo "::group::acode-run doctor"
status=0
acode-run doctor --workspace "${ACODE_WORKSPACE:?}" --sandbox "${ACODE_SANDBOX:?}" || status=$?
echo "::endgroup::"
if [ "$status" != 0 ]; then
  echo "::error title=acode-run doctor::acode-run cannot check the sandbox here (exit $status); see the lines above"
  exit "$status"
fi

#!/usr/bin/env bash
# Fails the job with acode-run's exit code (docs/ci.md says what each means), now that the reports
# are uploaded and the summary written.
set -euo pipefail
code="${ACODE_EXIT_CODE:-}"
if [ -z "$code" ]; then
  echo "::error title=acode-run::acode-run's exit code was not recorded"
  exit 1
fi
if [ "$code" != 0 ]; then
  echo "::error title=acode-run::the plan did not pass: acode-run exited $code (docs/ci.md: \"What each exit code should do to a pipeline\")"
  exit "$code"
fi
echo "acode-run: the plan passed"

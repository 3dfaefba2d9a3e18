#!/usr/bin/env bash
# The job summary when acode-run did not write one (it writes its own table for every run and
# refusal): which step stopped the job before the plan could run, so the summary page never shows
# a job that ran nothing without saying why.
set -euo pipefail
[ "${ACODE_SUMMARY_WRITTEN:-}" = true ] && exit 0
failed=""
for pair in ${ACODE_OUTCOMES:-}; do
  name="${pair%%=*}"
  outcome="${pair#*=}"
  if [ "$outcome" = failure ] || [ "$outcome" = cancelled ]; then
    failed="$name"
    break
  fi
done
{
  echo "### acode-run: the plan did not run"
  echo
  case "$failed" in
    inputs) echo "The action's inputs were refused (the step \"Check the inputs\" says why)." ;;
    install) echo "acode-run could not be installed (the step \"Install acode-run with the pinned toolchain\" says why)." ;;
    bwrap) echo "Setting up bubblewrap failed (the step \"Let bubblewrap (only) create user namespaces\" says why)." ;;
    doctor) echo "acode-run could not check the sandbox here (the step \"What the sandbox holds here\" says why)." ;;
    run) echo "acode-run did not start (exit ${ACODE_EXIT_CODE:-unknown}); its step's log says why." ;;
    *) echo "acode-run did not write a summary (exit ${ACODE_EXIT_CODE:-unknown}); the job's log says why." ;;
  esac
} >> "${GITHUB_STEP_SUMMARY:?}"

#!/usr/bin/env bash
# Runs the plan with the reports a pipeline reads (JUnit, HTML, annotations and the job summary,
# which acode-run writes itself on GitHub) and records its exit code as the step's output
# `exit-code`; the step itself passes so that the reports are uploaded and the summary written
# before the last step fails the job with that code.
set -uo pipefail
out="${ACODE_OUT:?}"
junit="$out/acode-report.xml"
report="$out/acode-report.html"
argv=(run "${ACODE_PLAN:?}" --workspace "${ACODE_WORKSPACE:?}" --sandbox "${ACODE_SANDBOX:?}"
  --junit "$junit" --report-html "$report")
[ -n "${ACODE_JOBS:-}" ] && argv+=(--jobs "$ACODE_JOBS")
[ -n "${ACODE_REPLAY:-}" ] && argv+=(--replay "$ACODE_REPLAY")
[ -n "${ACODE_ATTEST:-}" ] && argv+=(--attest "$ACODE_ATTEST")
set -f
for promise in ${ACODE_REQUIRE//,/ }; do
  argv+=(--require "$promise")
done
# shellcheck disable=SC2206 # whitespace-separated by design (the input's documentation says so)
extra=(${ACODE_ARGS:-})
set +f
argv+=("${extra[@]}")
summary_before="$(wc -c < "${GITHUB_STEP_SUMMARY:-/dev/null}" 2>/dev/null || echo 0)"
acode-run "${argv[@]}"
code=$?
summary_after="$(wc -c < "${GITHUB_STEP_SUMMARY:-/dev/null}" 2>/dev/null || echo 0)"
{
  echo "exit-code=$code"
  echo "junit=$junit"
  echo "report=$report"
  [ "$summary_after" != "$summary_before" ] && echo "summary-written=true"
} >> "$GITHUB_OUTPUT"
if [ -n "${ACODE_ATTEST:-}" ] && [ -f "$ACODE_ATTEST" ]; then
  cp "$ACODE_ATTEST" "$out/"
fi
echo "acode-run exited $code"

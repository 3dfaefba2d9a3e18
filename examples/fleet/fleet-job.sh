#!/bin/sh
# One machine of a fleet run (docs/fleet.md): the repository on line JOB_COMPLETION_INDEX + 1 of
# $FLEET/repositories is cloned and the approved plan run in it under the shipped policy; the
# record goes to $RECORDS/runs/INDEX/. A Kubernetes Indexed Job sets JOB_COMPLETION_INDEX; a CI
# matrix can set it from its own index. Exits 0 when the run took place and is recorded (passed
# or not: the fleet page says which), and with acode-run's code when nothing ran (not approved,
# refused, usage), so the orchestrator shows that machine as failed.
set -eu
: "${FLEET:=/fleet}" "${RECORDS:=/records}" "${WORK:=/work}"
index="${JOB_COMPLETION_INDEX:?set JOB_COMPLETION_INDEX}"
repository=$(sed -n "$((index + 1))p" "$FLEET/repositories")
if [ -z "$repository" ]; then
  echo "fleet-job: no repository on line $((index + 1)) of $FLEET/repositories" >&2
  exit 2
fi
out="$RECORDS/runs/$index"
mkdir -p "$out"
mkdir -p "$WORK"
rm -rf "$WORK/repository"
git clone --quiet --depth 1 "$repository" "$WORK/repository"
set +e
acode-run run "$FLEET/plan.json" --policy "$FLEET/policy.json" --workspace "$WORK/repository" --db "$out/executions.db" --junit "$out/junit.xml" --report-html "$out/report.html" --quiet
code=$?
set -e
echo "$code" > "$out/exit-code"
case "$code" in
  0 | 3[0-7]) exit 0 ;;
  *) exit "$code" ;;
esac

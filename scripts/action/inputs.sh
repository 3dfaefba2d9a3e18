#!/usr/bin/env bash
# The action's first step: checks its inputs before anything is built, so a job that names no
# plan, a plan outside the workspace or an unknown sandbox fails at once saying so (never a green
# job that ran nothing). Writes the resolved paths to $GITHUB_OUTPUT: plan, workspace (absolute),
# sandbox, dir (where the reports go), attest.
set -euo pipefail

fail() {
  # A workflow command: the message is the runner's, escaped as GitHub requires.
  local msg="${1//'%'/'%25'}"
  msg="${msg//$'\n'/'%0A'}"
  msg="${msg//$'\r'/'%0D'}"
  echo "::error title=acode-run: bad input::$msg"
  exit 1
}

plan="${ACODE_INPUT_PLAN:-}"
workspace="${ACODE_INPUT_WORKSPACE:-.}"
sandbox="${ACODE_INPUT_SANDBOX:-auto}"
jobs="${ACODE_INPUT_JOBS:-}"
attest="${ACODE_INPUT_ATTEST:-}"

[ -n "${plan//[[:space:]]/}" ] ||
  fail "the input 'plan' names no plan: set it to the plan file to run (with: plan: plans/change.json)"
[ -n "$workspace" ] || workspace=.
[ -d "$workspace" ] ||
  fail "the input 'workspace' ($workspace) is not a directory (relative to $PWD)"
ws="$(cd "$workspace" && pwd -P)"
[ -e "$plan" ] || fail "the plan $plan does not exist (relative to $PWD)"
[ -f "$plan" ] || fail "the plan $plan is not a file"
abs_plan="$(cd "$(dirname "$plan")" && pwd -P)/$(basename "$plan")"
case "$abs_plan" in
  "$ws"/*) ;;
  *) fail "the plan $plan ($abs_plan) is outside the workspace $ws: a plan runs in the workspace it lies in (set 'workspace', or move the plan into it)" ;;
esac
case "$sandbox" in
  auto | bwrap | landlock | none) ;;
  *) fail "the input 'sandbox' is $sandbox: expected auto, bwrap, landlock or none" ;;
esac
if [ -n "$jobs" ] && ! [[ "$jobs" =~ ^[0-9]+$ && "$jobs" -ge 1 && "$jobs" -le 256 ]]; then
  fail "the input 'jobs' is $jobs: expected a number from 1 to 256"
fi

dir="${RUNNER_TEMP:?RUNNER_TEMP is not set: run this action on a GitHub runner}/acode-run-${GITHUB_RUN_ID:-0}-${GITHUB_ACTION:-run}"
mkdir -p "$dir"
if [ -n "$attest" ]; then
  case "$attest" in
    /*) ;;
    *) attest="$PWD/$attest" ;;
  esac
fi
{
  echo "plan=$abs_plan"
  echo "workspace=$ws"
  echo "sandbox=$sandbox"
  echo "dir=$dir"
  echo "attest=$attest"
} >> "$GITHUB_OUTPUT"
echo "acode-run: plan $abs_plan in workspace $ws, sandbox $sandbox; reports in $dir"

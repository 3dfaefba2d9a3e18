#!/usr/bin/env bash
# Benchmark h (issue 36, docs/report.md): the HTML report of a 10 000-step run — its size, the time
# `acode-run report` takes to write it, and the time headless Chromium takes to load it (`--dump-dom`
# of the report, minus the same for a one-line page: what the page itself costs, not the browser's
# start). Called by scripts/bench.sh; runs alone too:
#
#   scripts/bench_report.sh BIN WORK OUT
#
#   BIN    the acode-run binary (bench.sh: target/release/acode-run)
#   WORK   a scratch directory (created; its ws-report/ and plans/ are used)
#   OUT    where report.tsv ("NAME<TAB>VALUE": size_bytes, render_s, chromium_page_s,
#          chromium_blank_s; medians of 3) goes, and skipped.tsv when Chromium is missing
#
# Needs python3 and Chromium (Debian package `chromium`); without Chromium it records the size and
# the render time and says why the load time is missing.

set -euo pipefail

BIN=$1
WORK=$2
OUT=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$WORK/plans" "$OUT"
WS="$WORK/ws-report"
rm -rf "$WS"
mkdir -p "$WS"
PLAN="$WORK/plans/report-10000.json"
PAGE="$WORK/report-10000.html"
python3 "$ROOT/scripts/gen_plan.py" write-read 5000 "$PLAN"
"$BIN" approve "$PLAN" --workspace "$WS" --by bench --quiet >/dev/null 2>&1
echo "  h. running the 10 000-step plan (write-read 5000) with --report-html" >&2
"$BIN" run "$PLAN" --workspace "$WS" --quiet --sandbox none --report-html "$PAGE"
run_id=$("$BIN" runs --workspace "$WS" --json --limit 1 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["run_id"])')
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n $browser ]] || printf 'h-load\t%s\n' "chromium is not installed (apt-get install -y chromium)" >>"$OUT/skipped.tsv"

python3 - "$BIN" "$WS" "$run_id" "$PAGE" "$WORK" "$OUT/report.tsv" "$browser" <<'PY'
import os, shutil, statistics, subprocess, sys, tempfile, time

bin_, ws, run_id, page, work, out, browser = sys.argv[1:8]


def timed(argv):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


rendered = os.path.join(work, "report-again.html")
render = statistics.median(
    timed([bin_, "report", run_id, "--workspace", ws, "--html", rendered]) for _ in range(3))
rows = [("size_bytes", os.path.getsize(page)), ("render_s", f"{render:.3f}")]

if browser:
    blank = os.path.join(work, "blank.html")
    with open(blank, "w") as f:
        f.write("<!DOCTYPE html><title>blank</title><p>blank</p>\n")

    def load(path):
        profile = tempfile.mkdtemp(prefix="acode-bench-chromium-")
        try:
            return timed([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update",
                          "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
                          "file://" + path])
        finally:
            shutil.rmtree(profile, ignore_errors=True)

    rows.append(("chromium_page_s", f"{statistics.median(load(page) for _ in range(3)):.3f}"))
    rows.append(("chromium_blank_s", f"{statistics.median(load(blank) for _ in range(3)):.3f}"))

with open(out, "w") as f:
    for k, v in rows:
        f.write(f"{k}\t{v}\n")
        print(f"  h. {k}: {v}", file=sys.stderr)
PY

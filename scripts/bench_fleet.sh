#!/usr/bin/env bash
# Benchmark i (issue 48, docs/fleet.md): merging 1 000 run databases of 10 steps each, and the
# fleet page of the 1 000 runs. Called by scripts/bench.sh; runs alone too:
#
#   scripts/bench_fleet.sh BIN WORK OUT
#
#   BIN    the acode-run binary (bench.sh: target/release/acode-run)
#   WORK   a scratch directory (created; its fleet/ is used)
#   OUT    where fleet.tsv ("NAME<TAB>VALUE": merge_1000_s, merge_1000_rss_kib, merge_100_rss_kib,
#          page_bytes, page_render_s, chromium_page_s, chromium_blank_s) goes, and skipped.tsv
#          when Chromium is missing
#
# The inputs: three real runs of a 10-step plan (5 file_write, 4 file_read, a command) in git
# repositories — one passes, one's command fails, one's command asks for a host the policy refuses
# — each recorded in a database of its own, then copied to 1 000 files with fresh run and
# execution ids and a repository URL each (python3's sqlite3), as 1 000 machines would send them.
# Memory must not grow with the number of inputs: the peak RSS of merging 1 000 is compared with
# merging 100. Needs python3, git and (for the load time) Chromium.

set -euo pipefail

BIN=$1
WORK=$2
OUT=$3
F="$WORK/fleet"
rm -rf "$F"
mkdir -p "$F/inputs" "$F/repos" "$OUT"

cat >"$F/plan.json" <<'JSON'
{"plan_id": "fleet-bench", "steps": [
  {"step_id": "w1", "tool": "file_write", "arguments": {"path": "a1.txt", "contents": "one\n"}},
  {"step_id": "w2", "tool": "file_write", "arguments": {"path": "a2.txt", "contents": "two\n"}},
  {"step_id": "w3", "tool": "file_write", "arguments": {"path": "a3.txt", "contents": "three\n"}},
  {"step_id": "w4", "tool": "file_write", "arguments": {"path": "a4.txt", "contents": "four\n"}},
  {"step_id": "w5", "tool": "file_write", "arguments": {"path": "VERSION", "contents": "2\n"}},
  {"step_id": "r1", "tool": "file_read", "arguments": {"path": "a1.txt"}},
  {"step_id": "r2", "tool": "file_read", "arguments": {"path": "a2.txt"}},
  {"step_id": "r3", "tool": "file_read", "arguments": {"path": "a3.txt"}},
  {"step_id": "r4", "tool": "file_read", "arguments": {"path": "a4.txt"}},
  {"step_id": "check", "tool": "run_command", "arguments": {"argv": ["python3", "check.py"]}}
]}
JSON
printf '{"commands": ["python3"], "network": {"allow": ["allowed.bench.test"]}}\n' >"$F/policy.json"
"$BIN" approve "$F/plan.json" --policy "$F/policy.json" --by bench --quiet \
    --db "$F/approval.db" >/dev/null 2>&1

checks=(
    "print('ok')"
    "import sys
for i in range(60): print('test', i, 'ok')
print('test 61 FAILED: expected 2, got 1', file=sys.stderr)
sys.exit(1)"
    "import urllib.request
urllib.request.urlopen('http://refused.bench.test/', timeout=10)"
)
for i in 0 1 2; do
    repo="$F/repos/r$i"
    mkdir -p "$repo"
    git -C "$repo" init -q
    printf '%s\n' "${checks[$i]}" >"$repo/check.py"
    printf '1\n' >"$repo/VERSION"
    git -C "$repo" -c user.name=b -c user.email=b@example.invalid add .
    git -C "$repo" -c user.name=b -c user.email=b@example.invalid commit -qm init
    git -C "$repo" remote add origin "https://git.example.invalid/bench/r$i.git"
    "$BIN" run "$F/plan.json" --policy "$F/policy.json" --workspace "$repo" \
        --db "$F/template-$i.db" --quiet --sandbox none >/dev/null 2>&1 || true
done

python3 - "$F" <<'PY'
import os, shutil, sqlite3, sys, uuid
f = sys.argv[1]
for n in range(1000):
    src = os.path.join(f, f"template-{n % 3}.db")
    dst = os.path.join(f, "inputs", f"machine-{n:04d}.db")
    shutil.copyfile(src, dst)
    c = sqlite3.connect(dst)
    run = str(uuid.uuid4())
    (old,) = c.execute("SELECT run_id FROM runs").fetchone()
    for (e,) in c.execute("SELECT execution_id FROM executions").fetchall():
        new = str(uuid.uuid4())
        for t in ("executions", "artifacts", "network_requests"):
            c.execute(f"UPDATE {t} SET execution_id = ? WHERE execution_id = ?", (new, e))
        c.execute("UPDATE executions SET parent_execution_id = ? WHERE parent_execution_id = ?", (new, e))
    for t in ("runs", "steps", "executions", "network_requests"):
        c.execute(f"UPDATE {t} SET run_id = ? WHERE run_id = ?", (run, old))
    c.execute("UPDATE runs SET repository = ?", (f"https://git.example.invalid/bench/repo-{n:04d}.git",))
    c.commit()
    c.execute("PRAGMA journal_mode = DELETE")
    c.close()
PY

mkdir -p "$F/first100"
for n in $(seq -f '%04g' 0 99); do cp "$F/inputs/machine-$n.db" "$F/first100/"; done

python3 - "$BIN" "$F" "$WORK" "$OUT/fleet.tsv" "$(command -v chromium || command -v chromium-browser || true)" <<'PY'
import os, resource, shutil, statistics, subprocess, sys, tempfile, time
bin_, f, work, out, browser = sys.argv[1:6]

def run(argv):
    t = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit(f"exit {p.returncode} from {argv}: {p.stderr.decode()[-500:]}")
    return time.perf_counter() - t

def rss_kib(argv):
    # Peak RSS of one child: GNU time when present, else getrusage of a fresh Python.
    if os.path.exists("/usr/bin/time"):
        tmp = os.path.join(work, "time.out")
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", tmp] + argv, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return int(open(tmp).read().split()[-1])
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    return int(subprocess.check_output(["python3", "-c", code] + argv).decode())

rows = []
merged = os.path.join(f, "fleet.db")
times = []
for _ in range(3):
    if os.path.exists(merged):
        os.remove(merged)
    times.append(run([bin_, "merge", merged, "--from-dir", os.path.join(f, "inputs")]))
rows.append(("merge_1000_s", f"{statistics.median(times):.3f}"))
for name, d in (("merge_1000_rss_kib", "inputs"), ("merge_100_rss_kib", "first100")):
    peaks = []
    for _ in range(3):
        target = os.path.join(f, f"rss-{d}.db")
        if os.path.exists(target):
            os.remove(target)
        peaks.append(rss_kib([bin_, "merge", target, "--from-dir", os.path.join(f, d)]))
    rows.append((name, str(statistics.median(peaks))))
# Merging the same 1 000 again: nothing changes (and how long it takes to find that out).
again = run([bin_, "merge", merged, "--from-dir", os.path.join(f, "inputs")])
rows.append(("merge_1000_again_s", f"{again:.3f}"))

page = os.path.join(f, "fleet.html")
render = statistics.median(run([bin_, "report", "--html", page, "--db", merged]) for _ in range(3))
rows.append(("page_bytes", str(os.path.getsize(page))))
rows.append(("page_render_s", f"{render:.3f}"))
if browser:
    blank = os.path.join(f, "blank.html")
    open(blank, "w").write("<!DOCTYPE html><title>blank</title><p>blank</p>\n")
    def load(path):
        profile = tempfile.mkdtemp(prefix="acode-bench-chromium-")
        try:
            return run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
                        "file://" + path])
        finally:
            shutil.rmtree(profile, ignore_errors=True)
    rows.append(("chromium_page_s", f"{statistics.median(load(page) for _ in range(3)):.3f}"))
    rows.append(("chromium_blank_s", f"{statistics.median(load(blank) for _ in range(3)):.3f}"))
else:
    with open(os.path.join(os.path.dirname(out), "skipped.tsv"), "a") as s:
        s.write("i-load\tchromium is not installed (apt-get install -y chromium)\n")
with open(out, "w") as o:
    for k, v in rows:
        o.write(f"{k}\t{v}\n")
        print(f"  i. {k}: {v}", file=sys.stderr)
PY

#!/usr/bin/env bash
# The project's benchmark for the SPEC §11 performance targets.
#
#   scripts/bench.sh [--no-build] [--quick]
#   scripts/bench.sh schema [CASES]
#
#   schema       the schema/validate property test (tests/cli/project/schema_property.rs) over CASES
#                generated plans (default 50 000; the ordinary suite runs 2 000), release build,
#                seed ACODE_PROPERTY_SEED (default: the suite's); nothing else is run.
#   --no-build   use the existing target/release/acode-run instead of running `cargo build --release`
#   --quick      fewer hyperfine runs (a smoke test of the script, not numbers to publish)
#
# Environment: BENCH_RUNS (hyperfine --runs, default 10), BENCH_WARMUP (default 2),
# BENCH_RSS_RUNS (runs per peak-RSS measurement, default 3), BENCH_TMP (scratch directory, default
# target/bench/tmp: on the repository's filesystem, so fsync costs what it costs for real work).
#
# Needs: cargo, hyperfine, python3 (plan generator and summary), GNU time (`/usr/bin/time`, package
# `time`; python3's getrusage is used when it is missing). Installs nothing.
#
# Results go to target/bench/: hyperfine exports (*.json, *.md), rss.tsv, and summary.md, the
# table of targets, measurements and pass/fail, which is also printed at the end.
#
# Benchmarks (each timed run starts from a fresh database, and from a fresh workspace where the
# plan writes files, after a `sync` so that writeback left by the previous run is not charged to
# the next):
#   a. orchestration overhead per step: a 1-step and a 1 000-step plan of file_read on a one-line
#      file; (T1000 - T1) / 999 with medians.
#   b. 1 000 steps = 500 x (file_write + file_read), against a bash script doing the same 500
#      printf-to-file + cat-from-file.
#   c. 500 x run_command `true`, against bash running /bin/true 500 times as a program.
#   d. peak RSS of a 10 000-step plan: file_read of a 7-byte file, and of an 8 KiB file.
#   e. peak RSS of one run_command printing 1 GiB (`head -c 1073741824 /dev/zero`), against one
#      printing 64 MiB: memory must not grow with the output.
#   f. --jobs: 8 independent `sleep 0.5` with --jobs 8 (target: at most 0.7 s), 3 independent
#      CPU-bound commands with --jobs 3 against --jobs 1 (target: at least 1.7 x faster on 2
#      cores), 10 000 independent file_read with --jobs 4 against --jobs 1 (no slower; peak RSS
#      under 30 MB).
#   g. peak RSS on 100 000-step plans (100 000 x file_read, and 50 000 x file_write + file_read):
#      `approve` showing its preview (the preview goes to a file), `approve --quiet`, `validate`,
#      `preview`, `preview --json`, and one `run --sandbox none --quiet` of the read plan (about a
#      minute). Target: <= 64 MB (SPEC section 11).
#   h. the HTML report of a 10 000-step run (scripts/bench_report.sh, runnable alone): its size,
#      the time `acode-run report` takes, and Chromium's load time beyond a blank page's. Targets:
#      <= 4 MB, <= 2 s, <= 3 s (docs/report.md). Needs Debian's `chromium` for the load time.
#   i. fleets (scripts/bench_fleet.sh, runnable alone): merging 1 000 run databases of 10 steps
#      each (time; peak RSS against merging 100: memory must not grow with the inputs), merging
#      them again (nothing changes), and the fleet page of the 1 000 runs: its size (< 10 MB) and
#      Chromium's load time beyond a blank page's (< 2 s; SPEC section 11 "Fleet").
# c and e are skipped, with a message, while `acode-run tools` does not list run_command.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT="$ROOT/target/bench"
BIN="$ROOT/target/release/acode-run"
GEN="$ROOT/scripts/gen_plan.py"
RUNS=${BENCH_RUNS:-10}
WARMUP=${BENCH_WARMUP:-2}
RSS_RUNS=${BENCH_RSS_RUNS:-3}
BUILD=1

usage() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

if [ "${1:-}" = schema ]; then
    cd "$ROOT"
    export ACODE_PROPERTY_CASES="${2:-50000}"
    exec cargo test --release --test cli schema_property -- --nocapture
fi

for arg in "$@"; do
    case "$arg" in
    --no-build) BUILD=0 ;;
    --quick)
        RUNS=3
        WARMUP=1
        RSS_RUNS=1
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "bench.sh: unknown argument: $arg" >&2
        usage >&2
        exit 2
        ;;
    esac
done

log() { printf '\n== %s\n' "$*" >&2; }
die() {
    printf 'bench.sh: %s\n' "$*" >&2
    exit 1
}

# --- prerequisites -------------------------------------------------------------------------------

if ! command -v hyperfine >/dev/null 2>&1; then
    die "hyperfine is not installed. Install it with: sudo apt-get install hyperfine (Debian/Ubuntu), or: cargo install --locked hyperfine"
fi
command -v python3 >/dev/null 2>&1 || die "python3 is needed for the plan generator and the summary"
GNU_TIME=0
if [[ -x /usr/bin/time ]] && /usr/bin/time -f '%M' -o /dev/null true 2>/dev/null; then
    GNU_TIME=1
else
    echo "bench.sh: GNU time not found (package 'time'); measuring peak RSS with python3's getrusage" >&2
fi

if [[ $BUILD == 1 ]]; then
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release)
fi
[[ -x $BIN ]] || die "$BIN not found (run without --no-build)"

mkdir -p "$OUT"
WORK=${BENCH_TMP:-$OUT/tmp}
rm -rf "$WORK"
mkdir -p "$WORK/plans"
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
rm -f "$OUT"/overhead.* "$OUT"/write_read.* "$OUT"/command.* "$OUT"/rss.tsv "$OUT"/skipped.tsv \
    "$OUT"/meta.tsv "$OUT"/summary.md "$OUT"/report.tsv

# --- helpers -------------------------------------------------------------------------------------

# q PATH: PATH quoted for the shell hyperfine runs commands in.
q() { printf '%q' "$1"; }

# gen KIND COUNT FILE [ARG]: writes a plan or script with scripts/gen_plan.py.
gen() { python3 "$GEN" "$@"; }

# approve PLAN WORKSPACE
approve() {
    local err
    err=$("$BIN" approve "$1" --workspace "$2" --by bench 2>&1 >/dev/null) || die "approve $1 failed: $err"
}

# check_run PLAN WORKSPACE STEPS [FLAGS...]: runs the plan once, untimed, and checks that every
# step completed and that the database recorded one execution per step. Leaves the database
# behind; the timed runs' --prepare removes it.
check_run() {
    local plan=$1 ws=$2 steps=$3 result
    shift 3
    result=$("$BIN" run "$plan" --workspace "$ws" --json --quiet "$@") ||
        die "sanity run of $plan failed (exit $?)"
    local run_id
    run_id=$(printf '%s' "$result" | python3 -c '
import json, sys
steps = int(sys.argv[1])
r = json.load(sys.stdin)
done = sum(1 for s in r["steps"] if s["status"] == "completed")
status, run_id = r["status"], r["run_id"]
if status != "completed" or done != steps:
    sys.exit(f"run {run_id}: status {status}, {done} of {steps} steps completed")
print(r["run_id"])
' "$steps") || die "sanity run of $plan did not complete"
    "$BIN" show "$run_id" --workspace "$ws" --json | python3 -c '
import json, sys
steps = int(sys.argv[1])
d = json.load(sys.stdin)
n = len(d["executions"])
if n != steps:
    sys.exit(f"{n} executions recorded for {steps} steps")
' "$steps" || die "the database of $ws does not hold one execution per step"
}

# peak_rss_kib CMD...: runs CMD once (output discarded) and prints its peak RSS in KiB, the
# largest of the process and the children it waited for.
peak_rss_kib() {
    local f="$WORK/rss.out" rc=0
    if [[ $GNU_TIME == 1 ]]; then
        /usr/bin/time -f '%M' -o "$f" "$@" >/dev/null 2>"$WORK/rss.err" || rc=$?
        [[ $rc == 0 ]] || die "exit $rc from: $* ($(tail -n 3 "$WORK/rss.err"))"
        tail -n 1 "$f"
    else
        python3 -c '
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
if rc != 0:
    sys.exit(f"exit {rc} from: {sys.argv[1:]}")
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
' "$@"
    fi
}

# hf NAME ARGS...: hyperfine with the common options, exporting NAME.json and NAME.md.
hf() {
    local name=$1
    shift
    hyperfine --warmup "$WARMUP" --runs "$RUNS" --style basic \
        --export-json "$OUT/$name.json" --export-markdown "$OUT/$name.md" "$@"
}

# fsync_probe: median and 90th percentile latency of one atomic small-file write done the way
# file_write does it (new temp file, write 100 bytes, fsync, rename over the target, fsync the
# directory), in the scratch directory. This explains most of benchmark b, and it rises sharply
# while other processes write to the same disk (e.g. parallel cargo builds).
fsync_probe() {
    python3 - "$WORK" <<'PY'
import os, statistics, sys, time
d = sys.argv[1]
lat = []
for i in range(50):
    t = time.perf_counter()
    tmp = os.path.join(d, f".probe-tmp-{i}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"x" * 100)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, os.path.join(d, "probe"))
    dfd = os.open(d, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    lat.append(time.perf_counter() - t)
os.unlink(os.path.join(d, "probe"))
lat.sort()
print(f"median {statistics.median(lat) * 1000:.2f} ms, p90 {lat[44] * 1000:.2f} ms per atomic write (2 fsyncs)")
PY
}

# --- machine -------------------------------------------------------------------------------------

cpu=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || true)
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
fs=$(df -PT "$WORK" | awk 'NR == 2 {print $2}')
{
    printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
    printf 'commit\t%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    printf 'machine\t%s cores, %s, %s RAM, scratch filesystem %s\n' "$(nproc)" "${cpu:-unknown CPU}" "$mem" "$fs"
    printf 'load average at start\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf 'fsync latency at start\t%s\n' "$(fsync_probe)"
    printf 'hyperfine\t%s, --warmup %s --runs %s\n' "$(hyperfine --version | cut -d' ' -f2)" "$WARMUP" "$RUNS"
} >"$OUT/meta.tsv"

HAVE_RUN_COMMAND=0
# Captured first: `grep -q` exits at the first match, and with pipefail an early-closed pipe would
# count as a failure of the listing.
TOOLS_JSON=$("$BIN" tools)
if grep -q '"run_command"' <<<"$TOOLS_JSON"; then
    HAVE_RUN_COMMAND=1
fi

# --- a. orchestration overhead per step -----------------------------------------------------------

log "a. orchestration overhead per step"
WS_READ="$WORK/ws-read"
mkdir -p "$WS_READ"
printf 'hello!\n' >"$WS_READ/tiny.txt"
# page.txt: 8 KiB of text, a typical source file, for the second RSS measurement in d.
for ((i = 0; i < 128; i++)); do
    printf 'line %03d: the quick brown fox jumps over the lazy dog 012345678\n' "$i"
done >"$WS_READ/page.txt"
for n in 1 1000 10000; do
    gen read "$n" "$WORK/plans/read-$n.json"
    approve "$WORK/plans/read-$n.json" "$WS_READ"
done
gen read 10000 "$WORK/plans/read-page-10000.json" page.txt
approve "$WORK/plans/read-page-10000.json" "$WS_READ"
check_run "$WORK/plans/read-1000.json" "$WS_READ" 1000
# A local OTLP collector that accepts everything (docs/observability.md): read-1000-traced against
# read-1000 is what exporting a trace costs; with no OTEL_* variable set (read-1000) tracing does
# no work at all beyond one check per tool call.
OTLP_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 - "$OTLP_PORT" <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
OTLP_PID=$!
trap 'kill "$OTLP_PID" 2>/dev/null; cleanup' EXIT
hf overhead \
    --prepare "rm -rf $(q "$WS_READ/.acode") && sync" \
    -n read-1 "$(q "$BIN") run $(q "$WORK/plans/read-1.json") --workspace $(q "$WS_READ") --quiet" \
    -n read-1000 "$(q "$BIN") run $(q "$WORK/plans/read-1000.json") --workspace $(q "$WS_READ") --quiet" \
    -n read-1000-jsonl "$(q "$BIN") run $(q "$WORK/plans/read-1000.json") --workspace $(q "$WS_READ") --quiet --jsonl" \
    -n read-1000-traced "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$OTLP_PORT $(q "$BIN") run $(q "$WORK/plans/read-1000.json") --workspace $(q "$WS_READ") --quiet"
kill "$OTLP_PID" 2>/dev/null || true
trap cleanup EXIT

# --- b. 1 000 file_write + file_read steps vs bash -----------------------------------------------

log "b. 500 x (file_write + file_read) vs bash printf + cat"
WS_WR="$WORK/ws-wr"
WS_BASH="$WORK/ws-bash"
mkdir -p "$WS_WR" "$WS_BASH"
gen write-read 500 "$WORK/plans/write-read.json"
gen bash-write-read 500 "$WORK/plans/write-read.sh"
approve "$WORK/plans/write-read.json" "$WS_WR"
check_run "$WORK/plans/write-read.json" "$WS_WR" 1000
bash "$WORK/plans/write-read.sh" "$WS_BASH"
diff -r "$WS_BASH/out" "$WS_WR/out" >/dev/null || die "bash and acode-run wrote different files"
# The same plan with the workspace (and so the database) on a tmpfs, where fsync costs nothing: the
# difference to the row above is what the durable writes cost on the real disk. Reported as a note.
WS_SHM=""
if [[ $(df -PT /dev/shm 2>/dev/null | awk 'NR == 2 {print $2}') == tmpfs ]]; then
    WS_SHM=$(mktemp -d /dev/shm/acode-bench.XXXXXX)
    trap 'cleanup; rm -rf "$WS_SHM"' EXIT
fi
fresh="$(q "$WS_WR") $(q "$WS_BASH")"
[[ -z $WS_SHM ]] || fresh+=" $(q "$WS_SHM")"
wr_args=(
    --prepare "rm -rf $fresh && mkdir $fresh && sync"
    -n bash "bash $(q "$WORK/plans/write-read.sh") $(q "$WS_BASH")"
    -n acode-run "$(q "$BIN") run $(q "$WORK/plans/write-read.json") --workspace $(q "$WS_WR") --quiet"
)
if [[ -n $WS_SHM ]]; then
    wr_args+=(-n acode-run-tmpfs "$(q "$BIN") run $(q "$WORK/plans/write-read.json") --workspace $(q "$WS_SHM") --quiet")
fi
hf write_read "${wr_args[@]}"

# --- c. 500 run_command true vs bash -------------------------------------------------------------

if [[ $HAVE_RUN_COMMAND == 1 ]]; then
    log "c. 500 x run_command true vs bash running /bin/true 500 times"
    WS_CMD="$WORK/ws-cmd"
    mkdir -p "$WS_CMD"
    true_path=$(type -P true)
    gen command 500 "$WORK/plans/true-500.json" true
    gen bash-command 500 "$WORK/plans/true-500.sh" "$true_path"
    approve "$WORK/plans/true-500.json" "$WS_CMD"
    check_run "$WORK/plans/true-500.json" "$WS_CMD" 500
    # Every sandbox mode: the default (auto: bwrap where it works), each mode explicitly, and auto
    # on a PATH without bwrap (a directory holding only `true`), which falls back to Landlock.
    NOBWRAP="$WORK/path-without-bwrap"
    mkdir -p "$NOBWRAP"
    ln -sf "$true_path" "$NOBWRAP/true"
    run_true="$(q "$BIN") run $(q "$WORK/plans/true-500.json") --workspace $(q "$WS_CMD") --quiet"
    cmd_args=(
        --prepare "rm -rf $(q "$WS_CMD/.acode") $(q "$WORK/ws-cmd-net/.acode") && sync"
        -n bash "bash $(q "$WORK/plans/true-500.sh")"
        -n acode-run "$run_true"
        -n acode-run-sandbox-none "$run_true --sandbox none"
    )
    # The same plan in a workspace whose policy allows one host: the run starts its network proxy
    # and every command gets the proxy variables. Against acode-run-sandbox-landlock (no host
    # allowed: no proxy) it shows what the proxy costs, and that a run allowing none pays nothing.
    WS_NET="$WORK/ws-cmd-net"
    mkdir -p "$WS_NET"
    printf '{ "network": { "allow": ["proxy-bench.example.invalid"] } }\n' >"$WS_NET/acode-policy.json"
    if "$BIN" run "$WORK/plans/true-500.json" --workspace "$WS_CMD" --quiet --sandbox landlock >/dev/null 2>&1; then
        # A copy of the plan: an approval is bound to the policy it was given under.
        cp "$WORK/plans/true-500.json" "$WORK/plans/true-500-net.json"
        approve "$WORK/plans/true-500-net.json" "$WS_NET"
        check_run "$WORK/plans/true-500-net.json" "$WS_NET" 500 --sandbox landlock
        cmd_args+=(
            -n acode-run-sandbox-landlock "$run_true --sandbox landlock"
            -n acode-run-auto-without-bwrap "env PATH=$(q "$NOBWRAP") $run_true"
            -n acode-run-sandbox-landlock-proxy "$(q "$BIN") run $(q "$WORK/plans/true-500-net.json") --workspace $(q "$WS_NET") --quiet --sandbox landlock"
        )
    else
        printf 'c-landlock\t%s\n' "this kernel has no Landlock" >>"$OUT/skipped.tsv"
    fi
    if "$BIN" run "$WORK/plans/true-500.json" --workspace "$WS_CMD" --quiet --sandbox bwrap >/dev/null 2>&1; then
        cmd_args+=(-n acode-run-sandbox-bwrap "$run_true --sandbox bwrap")
        # One bwrap per command, as before the supervisor (issue #23): what sharing one sandbox saves.
        cmd_args+=(-n acode-run-bwrap-per-command "env ACODE_SANDBOX_SUPERVISOR=off $run_true --sandbox bwrap")
    else
        printf 'c-bwrap\t%s\n' "bubblewrap is not usable here" >>"$OUT/skipped.tsv"
    fi
    hf command "${cmd_args[@]}"
else
    msg="run_command is not available in this build (acode-run tools does not list it)"
    echo "bench.sh: skipping c (500 x run_command true): $msg" >&2
    printf 'c\t%s\n' "$msg" >>"$OUT/skipped.tsv"
fi

# --- d. peak RSS on a 10 000-step plan -----------------------------------------------------------

log "d. peak RSS on a 10 000-step plan (file_read of a 7-byte file, then of an 8 KiB file)"
for name in read-10000 read-page-10000; do
    check_run "$WORK/plans/$name.json" "$WS_READ" 10000
    for ((i = 0; i < RSS_RUNS; i++)); do
        rm -rf "$WS_READ/.acode"
        kib=$(peak_rss_kib "$BIN" run "$WORK/plans/$name.json" --workspace "$WS_READ" --quiet)
        printf '%s\t%s\n' "$name" "$kib" >>"$OUT/rss.tsv"
        echo "  $name: peak RSS ${kib} KiB" >&2
    done
done

# --- e. constant memory when a command prints 1 GiB ---------------------------------------------

if [[ $HAVE_RUN_COMMAND == 1 ]]; then
    log "e. peak RSS when a command prints 64 MiB and 1 GiB"
    WS_OUT="$WORK/ws-out"
    mkdir -p "$WS_OUT"
    for size in 64MiB:67108864 1GiB:1073741824; do
        label=${size%%:*}
        gen command 1 "$WORK/plans/out-$label.json" "head -c ${size#*:} /dev/zero"
        approve "$WORK/plans/out-$label.json" "$WS_OUT"
        check_run "$WORK/plans/out-$label.json" "$WS_OUT" 1
        for ((i = 0; i < RSS_RUNS; i++)); do
            rm -rf "$WS_OUT/.acode"
            kib=$(peak_rss_kib "$BIN" run "$WORK/plans/out-$label.json" --workspace "$WS_OUT" --quiet)
            printf 'output-%s\t%s\n' "$label" "$kib" >>"$OUT/rss.tsv"
            echo "  $label: peak RSS ${kib} KiB" >&2
        done
    done
else
    msg="run_command is not available in this build (acode-run tools does not list it)"
    echo "bench.sh: skipping e (command printing 1 GiB): $msg" >&2
    printf 'e\t%s\n' "$msg" >>"$OUT/skipped.tsv"
fi

# --- f. parallel steps (--jobs) ------------------------------------------------------------------

if [[ $HAVE_RUN_COMMAND == 1 ]]; then
    log "f. --jobs: 8 x sleep 0.5, 3 CPU-bound commands, 10 000 independent file_read"
    WS_PAR="$WORK/ws-par"
    mkdir -p "$WS_PAR"
    printf 'hello!\n' >"$WS_PAR/tiny.txt"
    printf '{ "allow_commands": ["sleep"], "auto_approve_commands": ["sleep", "python3"] }\n' \
        >"$WS_PAR/acode-policy.json"
    gen independent-command 8 "$WORK/plans/sleep-8.json" "sleep 0.5"
    # About a second of CPU each on this machine: three of them on two cores.
    gen independent-command 3 "$WORK/plans/cpu-3.json" \
        "python3 -c 'sum(i * i for i in range(20000000))'"
    gen independent-read 10000 "$WORK/plans/iread-10000.json"
    for plan in sleep-8 cpu-3 iread-10000; do
        approve "$WORK/plans/$plan.json" "$WS_PAR"
    done
    check_run "$WORK/plans/sleep-8.json" "$WS_PAR" 8 --jobs 8
    par="$(q "$BIN") run --workspace $(q "$WS_PAR") --quiet"
    prep="rm -rf $(q "$WS_PAR/.acode") && sync"
    # Fewer runs: the serial rows take seconds each.
    PAR_RUNS=$(( RUNS < 5 ? RUNS : 5 ))
    hyperfine --warmup 1 --runs "$PAR_RUNS" --style basic --prepare "$prep" \
        --export-json "$OUT/parallel.json" --export-markdown "$OUT/parallel.md" \
        -n sleep8-jobs8 "$par $(q "$WORK/plans/sleep-8.json") --jobs 8" \
        -n sleep8-jobs1 "$par $(q "$WORK/plans/sleep-8.json") --jobs 1" \
        -n cpu3-jobs3 "$par $(q "$WORK/plans/cpu-3.json") --jobs 3" \
        -n cpu3-jobs1 "$par $(q "$WORK/plans/cpu-3.json") --jobs 1" \
        -n iread-jobs4 "$par $(q "$WORK/plans/iread-10000.json") --jobs 4" \
        -n iread-jobs1 "$par $(q "$WORK/plans/iread-10000.json") --jobs 1"
    for ((i = 0; i < RSS_RUNS; i++)); do
        rm -rf "$WS_PAR/.acode"
        kib=$(peak_rss_kib "$BIN" run "$WORK/plans/iread-10000.json" --workspace "$WS_PAR" --quiet --jobs 4)
        printf 'iread-10000-jobs4\t%s\n' "$kib" >>"$OUT/rss.tsv"
        echo "  10 000 independent file_read, --jobs 4: peak RSS ${kib} KiB" >&2
    done
else
    msg="run_command is not available in this build (acode-run tools does not list it)"
    printf 'f\t%s\n' "$msg" >>"$OUT/skipped.tsv"
fi

# --- g. peak RSS on 100 000-step plans ----------------------------------------------------------

log "g. peak RSS on 100 000-step plans: approve (with and without its preview), validate, preview, run"
WS_BIG="$WORK/ws-big"
mkdir -p "$WS_BIG"
printf 'hello!\n' >"$WS_BIG/tiny.txt"
gen read 100000 "$WORK/plans/read-100000.json"
gen write-read 50000 "$WORK/plans/write-read-100000.json"
for name in read-100000 write-read-100000; do
    plan="$WORK/plans/$name.json"
    for ((i = 0; i < RSS_RUNS; i++)); do
        for cmd in approve approve-quiet validate preview preview-json; do
            case $cmd in
            approve) argv=(approve "$plan" --by bench) ;;
            approve-quiet) argv=(approve "$plan" --by bench --quiet) ;;
            validate) argv=(validate "$plan") ;;
            preview) argv=(preview "$plan") ;;
            preview-json) argv=(preview --json "$plan") ;;
            esac
            rm -rf "$WS_BIG/.acode"
            kib=$(peak_rss_kib "$BIN" "${argv[@]}" --workspace "$WS_BIG")
            printf '%s\t%s\n' "$cmd-$name" "$kib" >>"$OUT/rss.tsv"
            echo "  $cmd $name: peak RSS ${kib} KiB" >&2
        done
    done
done
# One run (it takes about a minute): the plan was approved above.
rm -rf "$WS_BIG/.acode"
kib=$(peak_rss_kib "$BIN" run "$WORK/plans/read-100000.json" --workspace "$WS_BIG" --sandbox none --quiet)
printf 'run-read-100000\t%s\n' "$kib" >>"$OUT/rss.tsv"
echo "  run read-100000: peak RSS ${kib} KiB" >&2

# --- h. the HTML report of a 10 000-step run ------------------------------------------------------

log "h. HTML report of a 10 000-step run: size, acode-run report, Chromium load"
"$ROOT/scripts/bench_report.sh" "$BIN" "$WORK" "$OUT"

# --- i. fleets: merging 1 000 databases, the fleet page of 1 000 runs -----------------------------

log "i. fleets: merge 1 000 run databases of 10 steps, the fleet page of 1 000 runs"
"$ROOT/scripts/bench_fleet.sh" "$BIN" "$WORK" "$OUT"

# --- summary -------------------------------------------------------------------------------------

{
    printf 'load average at end\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf 'fsync latency at end\t%s\n' "$(fsync_probe)"
} >>"$OUT/meta.tsv"
log "summary (also in target/bench/summary.md)"
python3 "$ROOT/scripts/bench_summary.py" "$OUT"

#!/usr/bin/env python3
"""Turns the measurements of scripts/bench.sh into the SPEC §11 summary table.

Usage: bench_summary.py RESULTS_DIR

Reads from RESULTS_DIR:
  overhead.json     hyperfine export: "read-1", "read-1000" (and "read-1000-jsonl")
  write_read.json   hyperfine export: "bash", "acode-run" (and "acode-run-tmpfs")
  command.json      hyperfine export: "bash", "acode-run" (and "acode-run-sandbox-none",
                    "-sandbox-landlock", "-auto-without-bwrap", "-sandbox-bwrap", "-sandbox-landlock-proxy"); optional
  rss.tsv           lines "NAME<TAB>KIB" (peak RSS of single runs; several lines per name allowed):
                    read-10000, read-page-10000, output-64MiB, output-1GiB, iread-10000-jobs4,
                    COMMAND-read-100000 and COMMAND-write-read-100000 for COMMAND in approve,
                    approve-quiet, validate, preview, preview-json; run-read-100000
  parallel.json     hyperfine export: "sleep8-jobs8", "sleep8-jobs1", "cpu3-jobs3", "cpu3-jobs1",
                    "iread-jobs4", "iread-jobs1"; optional
  report.tsv        lines "NAME<TAB>VALUE" from scripts/bench_report.sh: size_bytes, render_s,
                    chromium_page_s, chromium_blank_s; optional
  fleet.tsv         lines "NAME<TAB>VALUE" from scripts/bench_fleet.sh: merge_1000_s,
                    merge_1000_rss_kib, merge_100_rss_kib, merge_1000_again_s, page_bytes,
                    page_render_s, chromium_page_s, chromium_blank_s; optional
  skipped.tsv       lines "BENCHMARK<TAB>REASON"; optional
  meta.tsv          lines "KEY<TAB>VALUE" describing the machine; optional
Writes RESULTS_DIR/summary.md and prints it.
"""

import json
import os
import statistics
import sys


def load_hyperfine(path):
    """name -> list of wall times (s), or None when the file is absent."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {r["command"]: r["times"] for r in data["results"]}


def load_tsv(path):
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line:
                    key, _, value = line.partition("\t")
                    rows.append((key, value))
    return rows


def ms(seconds):
    return f"{seconds * 1000:.1f} ms"


def verdict(ok):
    return "PASS" if ok else "FAIL"


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[0]
    rows = []  # (benchmark, target, measured, result)
    notes = []
    skipped = dict(load_tsv(os.path.join(out, "skipped.tsv")))

    # a. Orchestration overhead per step.
    oh = load_hyperfine(os.path.join(out, "overhead.json"))
    if oh:
        t1 = statistics.median(oh["read-1"])
        tn = statistics.median(oh["read-1000"])
        per_step = (tn - t1) / 999
        rows.append(
            (
                "a. orchestration overhead per step (file_read of a 1-line file, --quiet)",
                "median < 0.5 ms",
                f"{per_step * 1000:.3f} ms  (T1000 {ms(tn)}, T1 {ms(t1)}; (T1000−T1)/999)",
                verdict(per_step < 0.0005),
            )
        )
        if "read-1000-jsonl" in oh:
            tj = statistics.median(oh["read-1000-jsonl"])
            notes.append(
                f"With `--jsonl` events on stdout the 1 000-step plan takes {ms(tj)} "
                f"({(tj - t1) / 999 * 1000:.3f} ms per step)."
            )
        notes.append(
            "The per-step figure includes the file_read itself (open/read/close of an 8-byte file, "
            "a few µs), so it is an upper bound on pure orchestration."
        )

    # b. 1 000 file_write + file_read steps vs bash.
    wr = load_hyperfine(os.path.join(out, "write_read.json"))
    if wr:
        b = statistics.median(wr["bash"])
        a = statistics.median(wr["acode-run"])
        rows.append(
            (
                "b. 1 000 steps: 500 × (file_write + file_read) vs bash printf + cat",
                "≤ 1.00 × bash",
                f"{a / b:.2f} × bash  (acode-run {ms(a)}, bash {ms(b)})",
                verdict(a <= b),
            )
        )
        if "acode-run-tmpfs" in wr:
            t = statistics.median(wr["acode-run-tmpfs"])
            notes.append(
                f"b with the workspace and database on tmpfs (fsync is free): {ms(t)} = "
                f"{t / b:.2f} × bash; the difference to the real disk, {ms(a - t)}, is the cost "
                "of the durable writes (2 fsyncs per file_write plus WAL commits)."
            )

    # c. 500 run_command true vs bash running /bin/true 500 times.
    cm = load_hyperfine(os.path.join(out, "command.json"))
    if cm:
        b = statistics.median(cm["bash"])
        a = statistics.median(cm["acode-run"])
        # The default mode is `auto`: bubblewrap where it works (bench.sh measured `--sandbox
        # bwrap` only then), else Landlock. SPEC §11 (issue #23) sets 1.25 × bash for the default
        # mode whichever it resolves to.
        where = "auto → bwrap here" if "acode-run-sandbox-bwrap" in cm else "auto, no bwrap here"
        rows.append(
            (
                f"c. 500 × run_command `true` vs bash running /bin/true 500 times "
                f"(default mode: {where})",
                "≤ 1.25 × bash",
                f"{a / b:.2f} × bash  (acode-run {ms(a)}, bash {ms(b)})",
                verdict(a <= 1.25 * b),
            )
        )
        for name, label, target in [
            ("acode-run-sandbox-none", "--sandbox none", None),
            ("acode-run-sandbox-landlock", "--sandbox landlock", 1.25),
            ("acode-run-auto-without-bwrap", "auto without bwrap (Landlock)", 1.25),
            ("acode-run-sandbox-bwrap", "--sandbox bwrap", None),
            ("acode-run-bwrap-per-command", "--sandbox bwrap, one bwrap per command (supervisor off)", None),
            ("acode-run-sandbox-landlock-proxy", "--sandbox landlock, one host allowed (proxy)", None),
        ]:
            if name not in cm:
                continue
            n = statistics.median(cm[name])
            if target is None:
                notes.append(
                    f"run_command with {label}: {ms(n)} = {n / b:.2f} × bash "
                    "(for comparison; no target)."
                )
            else:
                rows.append(
                    (
                        f"c. 500 × run_command `true`, {label}",
                        f"≤ {target} × bash",
                        f"{n / b:.2f} × bash  ({ms(n)})",
                        verdict(n <= target * b),
                    )
                )
    elif "c" in skipped:
        rows.append(
            ("c. 500 × run_command `true` vs bash", "≤ 1.25 × bash", "not measured", "SKIPPED")
        )
        notes.append(f"c skipped: {skipped['c']}")

    # d. and e. Peak RSS.
    rss = {}
    for name, kib in load_tsv(os.path.join(out, "rss.tsv")):
        rss.setdefault(name, []).append(int(kib))
    for name, what in (
        ("read-10000", "file_read of a 7-byte file"),
        ("read-page-10000", "file_read of an 8 KiB file"),
    ):
        if name in rss:
            peak = max(rss[name])
            # 30 MB read as 30 * 10^6 bytes, the stricter of MB and MiB.
            rows.append(
                (
                    f"d. peak RSS, 10 000-step plan, {what}",
                    "< 30 MB (30·10⁶ B)",
                    f"{peak * 1024 / 1e6:.1f} MB = {peak / 1024:.1f} MiB, max of {len(rss[name])} runs",
                    verdict(peak * 1024 < 30e6),
                )
            )
    if "output-1GiB" in rss and "output-64MiB" in rss:
        big = max(rss["output-1GiB"])
        small = max(rss["output-64MiB"])
        # Constant: printing 16 times more (both beyond the 10 MiB capture cap) must not grow the
        # peak by more than 4 MiB.
        rows.append(
            (
                "e. peak RSS, command printing 1 GiB",
                "constant (≤ 64 MiB-output peak + 4 MiB)",
                f"{big / 1024:.1f} MiB (64 MiB output: {small / 1024:.1f} MiB)",
                verdict(big <= small + 4096),
            )
        )
    elif "e" in skipped:
        rows.append(("e. peak RSS, command printing 1 GiB", "constant", "not measured", "SKIPPED"))
        notes.append(f"e skipped: {skipped['e']}")

    # f. --jobs.
    par = load_hyperfine(os.path.join(out, "parallel.json"))
    if par:
        med = {k: statistics.median(v) for k, v in par.items()}
        if "sleep8-jobs8" in med:
            rows.append(
                (
                    "f. 8 × `sleep 0.5`, --jobs 8",
                    "≤ 0.7 s",
                    f"{ms(med['sleep8-jobs8'])} (--jobs 1: {ms(med['sleep8-jobs1'])})",
                    verdict(med["sleep8-jobs8"] <= 0.7),
                )
            )
        if "cpu3-jobs3" in med:
            ratio = med["cpu3-jobs1"] / med["cpu3-jobs3"]
            rows.append(
                (
                    "f. 3 CPU-bound commands, --jobs 3 vs --jobs 1",
                    "≥ 1.7 × faster",
                    f"{ratio:.2f} × ({ms(med['cpu3-jobs3'])} vs {ms(med['cpu3-jobs1'])})",
                    verdict(ratio >= 1.7),
                )
            )
        if "iread-jobs4" in med:
            a, b = med["iread-jobs4"], med["iread-jobs1"]
            rows.append(
                (
                    "f. 10 000 independent `file_read`, --jobs 4 vs --jobs 1",
                    "no slower (≤ 1.05 ×, the noise of one run)",
                    f"{a / b:.2f} × ({ms(a)} vs {ms(b)})",
                    verdict(a <= 1.05 * b),
                )
            )
    if "iread-10000-jobs4" in rss:
        peak = max(rss["iread-10000-jobs4"])
        rows.append(
            (
                "f. peak RSS, 10 000 independent `file_read`, --jobs 4",
                "< 30 MB (30·10⁶ B)",
                f"{peak * 1024 / 1e6:.1f} MB, max of {len(rss['iread-10000-jobs4'])} runs",
                verdict(peak * 1024 < 30e6),
            )
        )
    if "f" in skipped:
        notes.append(f"f skipped: {skipped['f']}")

    # g. Peak RSS at 100 000 steps. SPEC §11 says "64 MB"; read here as 64 MiB (the unit the
    # earlier measurements in docs/performance.md used); the measured column gives both.
    for plan, what in (("read-100000", "100 000 × file_read"),
                       ("write-read-100000", "50 000 × (file_write + file_read)")):
        for cmd, shown in (("approve", "approve (preview shown)"), ("approve-quiet", "approve --quiet"),
                           ("validate", "validate"), ("preview", "preview"),
                           ("preview-json", "preview --json"), ("run", "run --sandbox none")):
            name = f"{cmd}-{plan}"
            if name in rss:
                peak = max(rss[name])
                rows.append(
                    (
                        f"g. peak RSS, {shown}, {what}",
                        "≤ 64 MB (read as MiB)",
                        f"{peak / 1024:.1f} MiB = {peak * 1024 / 1e6:.1f}·10⁶ B, max of {len(rss[name])} runs",
                        verdict(peak <= 64 * 1024),
                    )
                )

    # h. The HTML report of a 10 000-step run (docs/report.md).
    report = dict(load_tsv(os.path.join(out, "report.tsv")))
    if "size_bytes" in report:
        size = int(report["size_bytes"])
        rows.append(("h. HTML report of a 10 000-step run, size", "≤ 4 MB (4·10⁶ B)",
                     f"{size / 1e6:.2f} MB", verdict(size <= 4e6)))
        render = float(report["render_s"])
        rows.append(("h. `acode-run report` of that run", "≤ 2 s", ms(render), verdict(render <= 2)))
    if "chromium_page_s" in report:
        page, blank = float(report["chromium_page_s"]), float(report["chromium_blank_s"])
        rows.append(("h. Chromium loads that report (beyond a blank page's load)", "≤ 3 s",
                     f"{ms(page - blank)} ({ms(page)} vs {ms(blank)})", verdict(page - blank <= 3)))
    if "h-load" in skipped:
        notes.append(f"h (Chromium load) skipped: {skipped['h-load']}")

    # i. Fleets: merging 1 000 run databases, the fleet page of 1 000 runs (docs/fleet.md).
    fleet = dict(load_tsv(os.path.join(out, "fleet.tsv")))
    if "merge_1000_s" in fleet:
        rows.append(("i. merge 1 000 run databases (10 steps each)", "(no target)",
                     ms(float(fleet["merge_1000_s"])), "—"))
        big, small = int(fleet["merge_1000_rss_kib"]), int(fleet["merge_100_rss_kib"])
        rows.append(("i. peak RSS merging 1 000 vs 100 databases", "flat (≤ 100 + 4 MiB)",
                     f"{big / 1024:.1f} MiB vs {small / 1024:.1f} MiB",
                     verdict(big <= small + 4 * 1024)))
        rows.append(("i. merging the same 1 000 again (changes nothing)", "(no target)",
                     ms(float(fleet["merge_1000_again_s"])), "—"))
        size = int(fleet["page_bytes"])
        rows.append(("i. fleet page of 1 000 runs, size", "< 10 MB (10⁷ B)", f"{size / 1e6:.2f} MB",
                     verdict(size < 1e7)))
        rows.append(("i. `acode-run report --html` of the fleet", "(no target)",
                     ms(float(fleet["page_render_s"])), "—"))
    if "chromium_page_s" in fleet:
        page, blank = float(fleet["chromium_page_s"]), float(fleet["chromium_blank_s"])
        rows.append(("i. Chromium loads the fleet page (beyond a blank page's load)", "< 2 s",
                     f"{ms(page - blank)} ({ms(page)} vs {ms(blank)})", verdict(page - blank < 2)))
    if "i-load" in skipped:
        notes.append(f"i (Chromium load) skipped: {skipped['i-load']}")

    lines = ["# acode-run benchmark summary (SPEC §11)", ""]
    meta = load_tsv(os.path.join(out, "meta.tsv"))
    for key, value in meta:
        lines.append(f"- {key}: {value}")
    if meta:
        lines.append("")
    lines.append("| benchmark | target | measured | result |")
    lines.append("|---|---|---|---|")
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    lines.append("")
    for n in notes:
        lines.append(f"- {n}")
    text = "\n".join(lines).rstrip() + "\n"
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

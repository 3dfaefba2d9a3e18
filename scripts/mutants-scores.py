#!/usr/bin/env python3
"""The score table of docs/testing.md from cargo-mutants' output directories.

Usage: scripts/mutants-scores.py DIR...   (e.g. mutants.out.d/core/*)

Each DIR is one file's run by scripts/mutants-core.sh (or mutants-sample.sh): DIR/mutants.out/ is
the unit-test pass, possibly run several times with --iterate (then `previously_caught.txt` holds
what earlier runs caught, and `mutants.out.old/` what they made of the rest), and DIR/cli/mutants.out/
the end-to-end pass over the unit pass's survivors. A mutant counts once, with its last outcome:
caught by either pass, missed by both, unviable, or timed out.
"""
import json
import os
import sys


def outcomes(out):
    """name -> outcome of one mutants.out directory (the run's outcomes.json)."""
    path = os.path.join(out, "outcomes.json")
    if not os.path.exists(path):
        return {}
    result = {}
    for o in json.load(open(path)).get("outcomes", []):
        scenario = o.get("scenario")
        if not isinstance(scenario, dict) or "Mutant" not in scenario:
            continue
        name = scenario["Mutant"]["name"]
        summary = o.get("summary", "")
        result[name] = {
            "CaughtMutant": "caught",
            "MissedMutant": "missed",
            "Unviable": "unviable",
            "Timeout": "timeout",
        }.get(summary, summary.lower())
    return result


def lines(path):
    return [l.strip() for l in open(path)] if os.path.exists(path) else []


def score(d):
    final = {}
    # Earlier unit runs (--iterate keeps one generation as mutants.out.old), then the last one.
    for out in (os.path.join(d, "mutants.out.old"), os.path.join(d, "mutants.out")):
        final.update(outcomes(out))
        for name in lines(os.path.join(out, "previously_caught.txt")):
            final.setdefault(name, "caught")
    # The end-to-end pass decides for the unit pass's survivors.
    for name, o in outcomes(os.path.join(d, "cli", "mutants.out")).items():
        if final.get(name) == "missed":
            final[name] = o
    counts = {k: 0 for k in ("caught", "missed", "unviable", "timeout")}
    for o in final.values():
        counts[o] = counts.get(o, 0) + 1
    missed = sorted(n for n, o in final.items() if o == "missed")
    return counts, missed


def main():
    total = {k: 0 for k in ("caught", "missed", "unviable", "timeout")}
    print("| file | mutants | caught | missed | unviable | timeout | score |")
    print("|---|---|---|---|---|---|---|")
    all_missed = []
    for d in sys.argv[1:]:
        counts, missed = score(d)
        all_missed += missed
        n = sum(counts.values())
        viable = counts["caught"] + counts["missed"] + counts["timeout"]
        pct = f"{100 * (viable - counts['missed']) / viable:.0f} %" if viable else "—"
        print(f"| `{os.path.basename(d.rstrip('/'))}` | {n} | {counts['caught']} | "
              f"{counts['missed']} | {counts['unviable']} | {counts['timeout']} | {pct} |")
        for k in total:
            total[k] += counts.get(k, 0)
    n = sum(total.values())
    viable = total["caught"] + total["missed"] + total["timeout"]
    pct = f"{100 * (viable - total['missed']) / viable:.0f} %" if viable else "—"
    print(f"| total | {n} | {total['caught']} | {total['missed']} | {total['unviable']} | "
          f"{total['timeout']} | {pct} |")
    if all_missed:
        print("\nmissed:")
        for m in all_missed:
            print(f"- `{m}`")


if __name__ == "__main__":
    main()

"""realgpu-bench-compare: realgpu-bench's figures against nccl-tests' on the same box, size by size.

    python -m realgpu.bench_compare --ours bench-g4.json bench-g2.json [--ours-graph ...]
        --nccl-tests DIR [--out report.md]

DIR holds nccl-tests outputs named nt-<binary>-g<gpus>.txt (eager) and nt-<binary>-g<gpus>-graph.txt
(-G). Rows are matched by collective, GPU count, mode, placement and size; where realgpu-bench has
only in-place (all_reduce, broadcast, reduce: torch's API is in place) it is compared with
nccl-tests' in-place column, otherwise out-of-place with out-of-place.

The goals (issue 6): at every size of at least 1 MiB busbw at least 0.95 of nccl-tests'; at 64 KB
and below time at most 1.2x nccl-tests' in eager mode and 1.1x with CUDA graphs. Rows that miss a
goal are marked; the exit status is 0 either way (a measurement, not a test).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Sequence

from realgpu.bench_report import load_results, read_nccl_tests_folder
from realgpu.environment import environment_line

BANDWIDTH_FROM = 1 << 20
LATENCY_UP_TO = 64 << 10
GOALS = {"busbw": 0.95, "eager": 1.2, "graph": 1.1}


def _mode_kind(mode: str) -> str:
    return "graph" if mode.startswith("graph") else "eager"


def load_nccl_tests(directory: Path) -> dict[tuple, dict]:
    """(collective, gpus, mode kind, placement, size) -> nccl-tests row."""
    return {(r["collective"], r["gpus"], r["mode"], r["placement"], r["size"]): r
            for r in read_nccl_tests_folder(directory)}


def compare(ours: list[dict], theirs: dict[tuple, dict]) -> list[dict]:
    """One line per realgpu-bench row that nccl-tests also measured."""
    lines = []
    for row in ours:
        kind = _mode_kind(row["mode"])
        key = (row["collective"], row["world_size"], kind, row["placement"], row["size"])
        other = theirs.get(key)
        if other is None:
            continue
        line = {"collective": row["collective"], "gpus": row["world_size"], "mode": kind,
                "placement": row["placement"], "size": row["size"], "ours_us": row["time_us"],
                "theirs_us": other["time_us"], "ours_busbw": row["busbw"], "theirs_busbw": other["busbw"],
                "time_ratio": row["time_us"] / other["time_us"] if other["time_us"] else math.nan,
                "busbw_ratio": row["busbw"] / other["busbw"] if other["busbw"] else math.nan}
        line["goal"], line["met"] = _goal(line)
        lines.append(line)
    return lines


def _goal(line: dict) -> tuple[str, bool | None]:
    if line["size"] >= BANDWIDTH_FROM:
        return f"busbw >= {GOALS['busbw']}x", line["busbw_ratio"] >= GOALS["busbw"]
    if line["size"] <= LATENCY_UP_TO:
        limit = GOALS[line["mode"]]
        return f"time <= {limit}x", line["time_ratio"] <= limit
    return "", None


def _size(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def markdown(lines: list[dict], env: dict) -> str:
    """Per (collective, gpus, mode): a table of both tools' figures and the ratio that has a goal."""
    out = [f"Environment: {environment_line(env)}", "",
           "Ratios: time = realgpu-bench / nccl-tests (lower is better), busbw = realgpu-bench / nccl-tests "
           "(higher is better). `MISS` marks a size under its goal.", ""]
    groups: dict[tuple, list[dict]] = {}
    for line in lines:
        groups.setdefault((line["collective"], line["gpus"], line["mode"]), []).append(line)
    summary = ["| collective | GPUs | mode | sizes with a goal | met | worst ratio (size) |", "|---|---|---|---|---|---|"]
    for (name, gpus, mode), rows in groups.items():
        graded = [r for r in rows if r["met"] is not None]
        misses = [r for r in graded if not r["met"]]
        worst = None
        if graded:
            worst = max(graded, key=lambda r: r["time_ratio"] if r["size"] <= LATENCY_UP_TO else 1 / r["busbw_ratio"])
        worst_text = ""
        if worst is not None:
            value = worst["time_ratio"] if worst["size"] <= LATENCY_UP_TO else worst["busbw_ratio"]
            what = "time" if worst["size"] <= LATENCY_UP_TO else "busbw"
            worst_text = f"{what} {value:.2f} ({_size(worst['size'])})"
        summary.append(f"| {name} | {gpus} | {mode} | {len(graded)} | {len(graded) - len(misses)} | {worst_text} |")
    out += ["## Summary", ""] + summary + [""]
    for (name, gpus, mode), rows in groups.items():
        placement = "in place" if rows[0]["placement"] == "in" else "out of place"
        out += [f"## {name}, {gpus} GPUs, {mode} ({placement})", "",
                "| size | realgpu-bench us | nccl-tests us | time ratio | realgpu-bench busbw | nccl-tests busbw "
                "| busbw ratio | goal |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            mark = "" if r["met"] is None else ("met" if r["met"] else "**MISS**")
            out.append(f"| {_size(r['size'])} | {r['ours_us']:.2f} | {r['theirs_us']:.2f} | {r['time_ratio']:.2f} "
                       f"| {r['ours_busbw']:.2f} | {r['theirs_busbw']:.2f} | {r['busbw_ratio']:.3f} "
                       f"| {r['goal']} {mark} |")
        out.append("")
    return "\n".join(out)


def _placement_filter(rows: list[dict]) -> list[dict]:
    """One placement per (collective, gpus, mode): out-of-place where measured, else in-place."""
    has_out = {(r["collective"], r["world_size"], r["mode"]) for r in rows if r["placement"] == "out"}
    return [r for r in rows if r["placement"] == "out" or (r["collective"], r["world_size"], r["mode"]) not in has_out]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="realgpu-bench-compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--ours", nargs="+", required=True, help="realgpu-bench JSON files (eager and/or -G)")
    p.add_argument("--nccl-tests", required=True, type=Path, help="folder of nccl-tests outputs")
    p.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    p.add_argument("--json", type=Path, default=None, help="write the matched rows here")
    args = p.parse_args(argv)
    doc = load_results(args.ours)
    rows, env = doc["results"], doc["environment"]
    theirs = load_nccl_tests(args.nccl_tests)
    if not theirs:
        print(f"realgpu-bench-compare: no nt-<binary>-g<N>[-graph].txt files in {args.nccl_tests}", file=sys.stderr)
        return 2
    lines = compare(_placement_filter(rows), theirs)
    text = markdown(lines, env)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(lines, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

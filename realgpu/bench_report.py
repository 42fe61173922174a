"""realgpu.bench's outputs: nccl-tests' table layout, the busbw plot, and reading nccl-tests' own output.

Every output carries the environment (device, driver, CUDA, NCCL, torch) next to the figures.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from realgpu.environment import environment_line

TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double", "int8": "int8",
              "uint8": "uint8", "int32": "int32", "int64": "int64", "float8_e4m3fn": "f8e4m3",
              "float8_e5m2": "f8e5m2"}
OP_NAMES = {"product": "prod"}


def _cell(row: dict | None) -> str:
    if row is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    wrong = "0" if row["ok"] else "WRONG"
    if not row.get("checked", True):
        wrong = "-"
    t = row["time_us"]
    time_text = f"{t:7.2f}" if t < 1e4 else f"{t:7.1f}" if t < 1e5 else f"{t:7.0f}"  # nccl-tests keeps the width
    return f"  {time_text}  {row['algbw']:6.2f}  {row['busbw']:6.2f}  {wrong:>6}"


def format_table(rows: list[dict], env: dict, plan: Any, world_size: int, mode: str,
                 placements: Iterable[str]) -> str:
    """One collective at one world size, laid out as nccl-tests prints it (out-of-place, then in-place)."""
    by_key = {(r["size"], r["placement"]): r for r in rows}
    lines = [f"# realgpu-bench: {rows[0]['collective'] if rows else plan.collective}, {world_size} rank(s), {mode}, "
             f"{plan.iters} iters after {plan.warmup} warm-up"
             f"{f', median of {plan.trials} trials' if plan.trials > 1 else ''}, median across ranks",
             f"# {environment_line(env)}",
             "#",
             f"# {'':>53}{'out-of-place':>20}{'':>17}{'in-place':>16}",
             f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
             f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}"
             f"  {'#wrong':>6}",
             f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
             f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}"]
    seen: list[int] = []
    for r in rows:
        if r["size"] not in seen:
            seen.append(r["size"])
    busbw = []
    for size in seen:
        first = by_key.get((size, "out")) or by_key.get((size, "in"))
        lines.append(f"  {size:>10}  {first['count']:>12}  {TYPE_NAMES.get(first['type'], first['type']):>8}"
                     f"  {OP_NAMES.get(first['redop'], first['redop']):>6}  {first['root']:>6}"
                     f"{_cell(by_key.get((size, 'out')))}{_cell(by_key.get((size, 'in')))}")
        busbw.append(first["busbw"])
    if busbw:
        lines.append(f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):.4g} GB/s "
                     f"(first placement of each size{'' if set(placements) != {'in'} else ', in place'})")
    wrong = [r for r in rows if not r["ok"]]
    lines.append(f"# Out of bounds values : {len(wrong)} {'OK' if not wrong else 'WRONG'}")
    return "\n".join(lines) + "\n"


def plot_busbw(doc: dict, path: str) -> None:
    """busbw against size, one panel per collective, a line per (world size, mode, placement). Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = doc["results"]
    names = list(dict.fromkeys(r["collective"] for r in results))
    cols = min(3, len(names)) or 1
    rows = -(-len(names) // cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        lines: dict[tuple, list[dict]] = {}
        for r in results:
            if r["collective"] == name:
                lines.setdefault((r["world_size"], r["mode"], r["placement"]), []).append(r)
        for (ws, mode, placement), pts in sorted(lines.items()):
            pts = [p for p in pts if p["size"] > 0]
            ax.plot([p["size"] for p in pts], [p["busbw"] for p in pts], marker=".",
                    label=f"{ws} GPUs, {mode}, {placement}-place")
        ax.set_xscale("log", base=2)
        ax.set_title(name)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle(environment_line(doc.get("environment", {})), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_results(paths: Iterable[str]) -> dict:
    """realgpu-bench --json files merged into one document: every result, the first environment."""
    import json

    doc: dict = {"environment": {}, "results": []}
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        if "results" not in part:
            raise ValueError(f"{path}: not a realgpu-bench JSON file (no 'results')")
        doc["environment"] = doc["environment"] or part.get("environment", {})
        doc["results"] += part["results"]
    return doc


_NCCL_FILE = re.compile(r"nt-(.+)-g(\d+)(-graph)?\.txt")


def read_nccl_tests_folder(folder: Any) -> list[dict]:
    """Every row of the nccl-tests outputs in a folder named nt-<binary>-g<gpus>[-graph].txt, with our
    collective name, the GPU count and the mode ("eager", or "graph" for -G) added. Where a file was
    run with `-N k` (the sweep repeated k times), each size (and type, op, root, placement) keeps the
    row of median time, the same statistic as realgpu-bench's --trials; "cycles" says how many rows it
    was chosen from."""
    from pathlib import Path

    from realgpu.bench_ops import NCCL_TESTS_NAMES

    ours = {binary: name for name, binary in NCCL_TESTS_NAMES.items()}
    rows = []
    for path in sorted(Path(folder).glob("nt-*.txt")):
        match = _NCCL_FILE.fullmatch(path.name)
        if not match or match.group(1) not in ours:
            continue
        extra = {"collective": ours[match.group(1)], "gpus": int(match.group(2)),
                 "mode": "graph" if match.group(3) else "eager"}
        rows += [{**row, **extra} for row in _median_of_cycles(parse_nccl_tests(path.read_text()))]
    return rows


_NCCL_ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(.*)$")


def parse_nccl_tests(text: str) -> list[dict]:
    """Rows of an nccl-tests *_perf output: size, count, type, redop, root, and per placement time/algbw/busbw.

    A placement nccl-tests did not run shows as N/A and is left out; with `-N k` every size appears k times.
    """
    rows = []
    for line in text.splitlines():
        match = _NCCL_ROW.match(line)
        if not match:
            continue
        fields = match.group(6).split()
        for placement, cells in (("out", fields[0:4]), ("in", fields[4:8])):
            if len(cells) < 3 or cells[0] == "N/A":
                continue
            try:
                time_us, algbw, busbw = float(cells[0]), float(cells[1]), float(cells[2])
            except ValueError:
                continue
            rows.append({"size": int(match.group(1)), "count": int(match.group(2)), "type": match.group(3),
                         "redop": match.group(4), "root": int(match.group(5)), "placement": placement,
                         "time_us": time_us, "algbw": algbw, "busbw": busbw,
                         "wrong": cells[3] if len(cells) > 3 else ""})
    return rows


def _median_of_cycles(rows: list[dict]) -> list[dict]:
    """One row per (size, type, reduce op, root, placement): the one of median time among nccl-tests'
    -N repeats (the lower middle one for an even count), in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["size"], row["type"], row["redop"], row["root"], row["placement"])
        groups.setdefault(key, []).append(row)
    chosen = []
    for group in groups.values():
        by_time = sorted(group, key=lambda r: r["time_us"])
        row = dict(by_time[(len(by_time) - 1) // 2])
        row["cycles"] = len(group)
        wrong = [r["wrong"] for r in group if r["wrong"] not in ("", "0", "N/A")]
        if wrong:  # a wrong result in any cycle counts, whichever cycle's time is the median
            row["wrong"] = wrong[0]
        chosen.append(row)
    return chosen


def main(argv: list[str] | None = None) -> int:
    """Plot saved realgpu-bench JSON files: python -m realgpu.bench_report --png OUT.png IN.json [IN.json ...]."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m realgpu.bench_report", description=main.__doc__)
    p.add_argument("--png", required=True, help="the plot to write")
    p.add_argument("inputs", nargs="+", help="realgpu-bench --json outputs (merged into one plot)")
    args = p.parse_args(argv)
    doc = load_results(args.inputs)
    try:
        plot_busbw(doc, args.png)
    except ImportError:
        print("realgpu.bench_report: plotting needs matplotlib (pip install 'simgpu[plot]')", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

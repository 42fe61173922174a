"""Where a real step's host time goes, against a plan's host clock (issue 33; docs/plan-mode.md, stop 34).

    python benchmarks/plan_reference/host_split.py RESULTS_DIR > RESULTS_DIR/host-split.md

RESULTS_DIR holds one box call's outputs: step_reference's `real-sr.jsonl` and llama_3d's `real-llama.jsonl`
(each rank's `thread_cpu_ms`: CPU per thread and step, thread_cpu.py), the plans of the same programs
(`plan-sr/`, `plan-l121/`, `plan-l112/`: plan-<pid>.json) and optionally `prof121/rank<r>.json.gz`
(torch.profiler's Chrome traces of one llama_3d step: CUDA runtime calls by name).
"""
from __future__ import annotations

import collections
import gzip
import json
import statistics
import sys
from pathlib import Path

LAYOUTS = ("ddp", "fsdp2", "fsdp2_mp", "tp")


def _host_threads(threads: dict[str, float]) -> tuple[float, float]:
    """The main thread's CPU ms and autograd's device threads' (backward on CUDA runs there)."""
    return threads.get("main", 0.0), sum(v for k, v in threads.items() if k.startswith("pt_autograd"))


def real_rows(folder: Path) -> list[str]:
    rows = ["| program | layout | rank | step ms (wall) | main thread CPU ms | autograd thread CPU ms | both / wall | "
            "speed probe us |", "|---|---|---|---|---|---|---|---|"]
    records = []
    for line in (folder / "real-sr.jsonl").read_text().splitlines():
        r = json.loads(line)
        records += [(f"step_reference {r['size']}", r["layout"], x) for x in r["ranks"]]
    for line in (folder / "real-llama.jsonl").read_text().splitlines():
        x = json.loads(line)
        records.append(("llama_3d small", "x".join(x["mesh"].split()), x))
    for program, layout, x in records:
        main, autograd = _host_threads(x["thread_cpu_ms"])
        rows.append(f"| {program} | {layout} | {x['rank']} | {x['step_ms']:.1f} | {main:.1f} | {autograd:.1f} | "
                    f"{(main + autograd) / x['step_ms']:.2f} | {x['probe_us']:.0f} |")
    return rows


def _plans(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("plan-*.json"))]


def plan_rows(folder: Path, sizes: tuple[str, ...] = ("tiny", "small"), per_layout: int = 6, warmup: int = 2) -> list[str]:
    rows = ["| program | layout | rank | steps | host ms | program CPU ms | speed probe us (median, range) |",
            "|---|---|---|---|---|---|---|"]
    groups = []
    for plan in _plans(folder / "plan-sr"):
        k = 0
        for size in sizes:
            for layout in LAYOUTS:
                groups.append((f"step_reference {size}", layout, plan["rank"], plan["steps"][k + warmup:k + per_layout]))
                k += per_layout
    for tag in ("121", "112"):
        for plan in _plans(folder / f"plan-l{tag}"):
            groups.append(("llama_3d small", "x".join(tag), plan["rank"], plan["steps"][1:]))
    for program, layout, rank, steps in groups:
        host = statistics.median(s["host_us"] for s in steps) / 1e3
        cpu = statistics.median(s["program_cpu_us"] for s in steps) / 1e3
        probes = [s["probe_us"] for s in steps]
        rows.append(f"| {program} | {layout} | {rank} | {len(steps)} | {host:.1f} | {cpu:.1f} | "
                    f"{statistics.median(probes):.0f} ({min(probes):.0f}-{max(probes):.0f}) |")
    return rows


def runtime_rows(folder: Path, top: int = 8) -> list[str]:
    rows = []
    for trace in sorted((folder / "prof121").glob("rank*.json.gz")):
        events = [e for e in json.load(gzip.open(trace))["traceEvents"] if e.get("ph") == "X"]
        calls: dict[str, list[float]] = collections.defaultdict(list)
        for e in events:
            if e.get("cat") in ("cuda_runtime", "cuda_driver"):
                calls[e["name"]].append(e["dur"])
        kernels = sum(1 for e in events if e.get("cat") == "kernel")
        total = sum(sum(v) for v in calls.values()) / 1e3
        rows += [f"{trace.name}: {kernels} kernels, CUDA runtime and driver calls {total:.1f} ms of host time "
                 f"(under the profiler)", "", "| call | count | ms | us each |", "|---|---|---|---|"]
        for name, durations in sorted(calls.items(), key=lambda kv: -sum(kv[1]))[:top]:
            rows.append(f"| {name} | {len(durations)} | {sum(durations) / 1e3:.2f} | {statistics.mean(durations):.1f} |")
        rows.append("")
    return rows


def main() -> None:
    folder = Path(sys.argv[1])
    print(f"# Host time by thread: {folder.name}\n")
    print("## Real steps on the GPUs (CPU per thread and step, medians over the timed steps)\n")
    print("\n".join(real_rows(folder)))
    print("\n## Plans of the same programs on the box's CPU (for the box's standalone probe)\n")
    print("\n".join(plan_rows(folder)))
    if (folder / "prof121").is_dir():
        print("\n## CUDA's runtime calls in one profiled llama_3d 1x2x1 step\n")
        print("\n".join(runtime_rows(folder)))


if __name__ == "__main__":
    main()

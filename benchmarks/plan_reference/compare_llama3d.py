"""Predicted (plans of llama_3d.py) against measured (llama_3d.py on GPUs): per mesh and rank, the peak
reserved memory and the median step time. Prints a markdown table.

    # on the GPUs, one run per mesh, each rank's JSON line appended to steps.jsonl
    torchrun --nproc-per-node 4 benchmarks/plan_reference/llama_3d.py --mesh 2 2 1 --size small --steps 6 --warmup 2
    # here, one plan directory per mesh (--ranks auto: whole pipelines, so the stages wait for each other)
    SIMGPU_PLAN_DIR=plan-2-2-1 simgpu run --plan h200-141g --gpus 4 --ranks auto torchrun --nproc-per-node 4 \\
        benchmarks/plan_reference/llama_3d.py --mesh 2 2 1 --size small --steps 3 --warmup 1
    python benchmarks/plan_reference/compare_llama3d.py --measured steps.jsonl --plans plan-4-1-1 plan-2-1-2 plan-2-2-1

"host ms measured" is the time the host took to issue the step (llama_3d.py's issue_ms: up to the step's
last call, before its synchronize); a step bound by the host has it close to the step.
The measured lines carry each rank's mesh coordinates (pp, dp, tp) but not the mesh: consecutive lines of
one world are one run, its mesh the largest coordinate + 1 of each dimension. A plan directory's name
ends with its mesh (`...-PP-DP-TP`). The plan's step is its median over the steps after the first
(plan.summarize), its memory the allocator model's reserved peak.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simgpu.cuda_sim import plan, plan_host  # noqa: E402


def measured_runs(path: Path, world: int) -> dict[tuple[int, int, int], dict[int, dict]]:
    """mesh (pp, dp, tp) -> rank -> that rank's line: by the line's "mesh" ("4 1 1") where it has one,
    else the lines taken `world` at a time."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")]
    runs: dict[tuple[int, int, int], dict[int, dict]] = {}
    if all("mesh" in r for r in lines):
        for r in lines:
            runs.setdefault(tuple(int(x) for x in str(r["mesh"]).split()), {})[r["rank"]] = r
        return runs
    for start in range(0, len(lines) - world + 1, world):
        chunk = lines[start:start + world]
        mesh = tuple(max(r[k] for r in chunk) + 1 for k in ("pp", "dp", "tp"))
        runs[mesh] = {r["rank"]: r for r in chunk}
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", type=Path, required=True)
    parser.add_argument("--plans", type=Path, nargs="+", required=True, help="one SIMGPU_PLAN_DIR per mesh, named ...-PP-DP-TP")
    parser.add_argument("--world", type=int, default=4)
    args = parser.parse_args()
    runs = measured_runs(args.measured, args.world)
    gib = float(1 << 30)
    print("| mesh pp x dp x tp | rank | allocated GiB measured | predicted | reserved GiB measured | predicted | ratio | "
          "step ms measured | predicted | ratio | compute ms | exposed comm + bubble ms | host ms measured | predicted |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    memory, steps = [], []
    for folder in args.plans:
        mesh = tuple(int(x) for x in folder.name.split("-")[-3:])
        real = runs.get(mesh)
        if real is None:
            print(f"| {' x '.join(map(str, mesh))} | - | not measured | | | | | | | | | | | |")
            continue
        for row in plan.summarize(plan.read_plans(folder)):
            theirs = real.get(row["rank"])
            if theirs is None or theirs.get("step_ms") is None:
                continue
            m = row["max_reserved"] / theirs["max_reserved"]
            t = row["step_us"] / 1e3 / theirs["step_ms"]
            memory.append(m)
            steps.append(t)
            print(f"| {' x '.join(map(str, mesh))} | {row['rank']} | {theirs['max_allocated'] / gib:.2f} | "
                  f"{row['max_allocated'] / gib:.2f} | {theirs['max_reserved'] / gib:.2f} | "
                  f"{row['max_reserved'] / gib:.2f} | {m:.3f} | {theirs['step_ms']:.1f} | {row['step_us'] / 1e3:.1f} | "
                  f"{t:.2f} | {row['compute_us'] / 1e3:.1f} | {row['exposed_comm_us'] / 1e3:.1f} | "
                  f"{_ms(theirs.get('issue_ms'))} | {row['host_us'] / 1e3:.1f} |")
    if memory:
        print()
        print(f"reserved: {min(memory):.3f}-{max(memory):.3f} x ({plan_host.typical_error(memory):.1%} typical error); "
              f"step: {min(steps):.2f}-{max(steps):.2f} x ({plan_host.typical_error(steps):.1%}); {len(memory)} rank rows")


def _ms(value: float | None) -> str:
    """A measured figure older runs lack (issue_ms: the host's time to issue the step, since stop 32)."""
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    main()

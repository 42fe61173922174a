"""Predicted (a `simgpu run --plan` of step_reference.py) against measured (step_reference.py on GPUs):
per model size, layout and rank, the peak reserved memory and the step time. Prints a markdown table.

    SIMGPU_PLAN_DIR=/tmp/plan simgpu run --plan h200-141g --gpus 2 torchrun --nproc-per-node 2 \\
        benchmarks/plan_reference/step_reference.py --size small medium large --warmup 1 --steps 2 --out /tmp/plan/steps.jsonl
    python benchmarks/plan_reference/compare.py --measured benchmarks/results/plan33-h200-x4-2026-11-26/steps.jsonl \\
        --plan-dir /tmp/plan --world 2

The plan's memory is what the program itself read from torch.cuda under the plan (the allocator model's
peaks, per layout: step_reference resets them between layouts). Its step time is the plan's record of
each rank's last optimizer step in the layout (the timeline of plan.py: compute, collectives overlapping
it until the program waits on the default stream, each op no earlier than the host issued it: plan_host.py).
Under `--ranks` rank 0's record holds its own figures for every rank (all_gather_object completes by
symmetry): memory is then compared on rank 0's row only ("-" elsewhere); each rank's step comes from its
own plan file.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def predicted_steps(plan_dir: Path, planned: list[dict]) -> dict[tuple[str, str, int], dict]:
    """(size, layout, rank) -> the plan's record of that rank's last step in the layout."""
    per_rank = {}
    for path in plan_dir.glob("plan-*.json"):
        doc = json.loads(path.read_text())
        per_rank[doc["rank"]] = doc["steps"]
    out = {}
    for rank, steps in per_rank.items():
        position = 0
        for record in planned:
            count = record["steps_run"]
            chunk = steps[position:position + count]
            position += count
            if chunk:
                out[(record["size"], record["layout"], rank)] = chunk[-1]
    return out


def _steps_per_layout(plan_dir: Path, layouts: int) -> int:
    """Every layout runs warmup + steps optimizer steps, each one step of a plan file."""
    counts = {len(json.loads(p.read_text())["steps"]) for p in plan_dir.glob("plan-*.json")}
    if len(counts) != 1 or not layouts or max(counts) % layouts:
        raise SystemExit(f"compare.py: the plan files in {plan_dir} hold {sorted(counts)} steps for {layouts} layouts: "
                         f"pass --steps-per-layout")
    return counts.pop() // layouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", type=Path, required=True)
    parser.add_argument("--plan-dir", type=Path, required=True, help="SIMGPU_PLAN_DIR of the plan run (its steps.jsonl too)")
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--steps-per-layout", type=int, default=None,
                        help="warmup + steps of the plan run (default: a plan file's steps over the layouts planned)")
    args = parser.parse_args()
    measured = {(r["size"], r["layout"]): r for r in _lines(args.measured) if r["environment"]["world"] == args.world}
    planned = _lines(args.plan_dir / "steps.jsonl")
    per_layout = args.steps_per_layout or _steps_per_layout(args.plan_dir, len(planned))
    for record in planned:
        record["steps_run"] = per_layout
    steps = predicted_steps(args.plan_dir, planned)
    print("| size | layout | rank | allocated GiB measured | predicted | reserved GiB measured | predicted | ratio | "
          "step ms measured | predicted | ratio | compute ms | exposed comm ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    gib = float(1 << 30)
    memory_ratios: dict[str, list[float]] = {}
    step_ratios: dict[str, list[float]] = {}
    for record in planned:
        real = measured.get((record["size"], record["layout"]))
        if real is None:
            continue
        for rank, (mine, theirs) in enumerate(zip(record["ranks"], real["ranks"])):
            step = steps.get((record["size"], record["layout"], rank), {})
            compute = step.get("compute_us", 0) / 1e3
            predicted = _step_ms(step)
            if "max_reserved" not in theirs or "max_reserved" not in mine:
                print(f"| {record['size']} | {record['layout']} | {rank} | {theirs.get('error', '?')} | "
                      f"{mine.get('error', '?')} | | | | | | | | |")
                continue
            timing = predicted / theirs["step_ms"]
            step_ratios.setdefault(record["layout"], []).append(timing)
            if mine["rank"] == rank:
                memory = mine["max_reserved"] / theirs["max_reserved"]
                memory_ratios.setdefault(record["layout"], []).append(memory)
                planned_memory = (f"{mine['max_allocated'] / gib:.2f} | {theirs['max_reserved'] / gib:.2f} | "
                                  f"{mine['max_reserved'] / gib:.2f} | {memory:.3f}")
            else:  # under --ranks: rank 0's figures copied (module docstring)
                planned_memory = f"- | {theirs['max_reserved'] / gib:.2f} | - | -"
            print(f"| {record['size']} | {record['layout']} | {rank} | {theirs['max_allocated'] / gib:.2f} | "
                  f"{planned_memory} | {theirs['step_ms']:.1f} | {predicted:.1f} | "
                  f"{timing:.2f} | {compute:.1f} | {max(predicted - compute, 0):.1f} |")
    print()
    print("| layout | rows | reserved: ratio range | geometric-mean error | step: ratio range (rows, typical error) |")
    print("|---|---|---|---|---|")
    everything = [r for ratios in memory_ratios.values() for r in ratios]
    for layout, ratios in [*memory_ratios.items(), ("all", everything)]:
        timing = step_ratios.get(layout, [r for rs in step_ratios.values() for r in rs])
        print(f"| {layout} | {len(ratios)} | {min(ratios):.3f}-{max(ratios):.3f} | {_gm_error(ratios):.1%} | "
              f"{min(timing):.2f}-{max(timing):.2f} ({len(timing)} rows, {_gm_error(timing):.1%}) |")


def _step_ms(step: dict) -> float:
    """The plan's step as it recorded it (its GPU timeline with the host's clock: plan.py, plan_host.py)."""
    return step.get("step_us", step.get("compute_us", 0) + step.get("comm_us", 0)) / 1e3


def _gm_error(ratios: list[float]) -> float:
    """exp(mean |log ratio|) - 1: the typical relative error, over- and under-predictions alike."""
    return math.exp(sum(abs(math.log(r)) for r in ratios) / len(ratios)) - 1 if ratios else 0.0

if __name__ == "__main__":
    main()

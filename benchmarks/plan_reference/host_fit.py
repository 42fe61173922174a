"""Fit the plan's host launch model (simgpu/cuda_sim/plan_host.py) on recorded H200 runs and print
predicted/measured step time before (the GPU timeline alone) and after (max of it and the host time),
per layout, with a cross-check: constants fitted at one world size, judged at the other.

    python benchmarks/plan_reference/host_fit.py            # the committed plan33 results

Rows: every rank of every layout of step_reference.py's plan (`second-plan-g2/4`: the plan's last step
of the layout) against the GPUs' median step (`steps.jsonl`). The pipeline layout (pp) is printed but
not fitted: its bubbles and PipelineStage's schedule are not this model's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import compare  # noqa: E402 - beside this file

from simgpu.cuda_sim import plan_host  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "plan33-h200-x4-2026-11-26"


def rows(results: Path, world: int, plan_dir: str) -> list[tuple[str, str, int, plan_host.Row]]:
    """(size, layout, rank, Row) for every rank the GPU and the plan both recorded."""
    measured = {(r["size"], r["layout"]): r for r in compare._lines(results / "steps.jsonl")
                if r["environment"]["world"] == world}
    planned = compare._lines(results / f"{plan_dir}-steps.jsonl")
    for record in planned:
        record["steps_run"] = 3
    steps = compare.predicted_steps(results / plan_dir, planned)
    out = []
    for record in planned:
        real = measured.get((record["size"], record["layout"]))
        if real is None:
            continue
        for mine, theirs in zip(record["ranks"], real["ranks"]):
            step = steps.get((record["size"], record["layout"], mine["rank"]))
            if step is None or "step_ms" not in theirs:
                continue
            gpu = step.get("gpu_step_us", step["step_us"])
            out.append((record["size"], record["layout"], mine["rank"],
                        plan_host.Row(step["ops"], step["collectives"], gpu, theirs["step_ms"] * 1e3)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    table = {2: rows(args.results, 2, "second-plan-g2"), 4: rows(args.results, 4, "second-plan-g4")}
    fitted = {w: [r for *_, r in table[w]] for w in table}
    fitted_no_pp = {w: [r for _, layout, _, r in table[w] if layout != "pp"] for w in table}
    op_us, coll_us, error = plan_host.fit(fitted_no_pp[2] + fitted_no_pp[4])
    print(f"fit over both world sizes, pp left out: OP_US={op_us:g} COLLECTIVE_US={coll_us:g} "
          f"(typical error {error:.1%}); plan_host has OP_US={plan_host.OP_US:g} COLLECTIVE_US={plan_host.COLLECTIVE_US:g}")
    for train, test in ((2, 4), (4, 2)):
        a, b, e = plan_host.fit(fitted_no_pp[train])
        held = plan_host.typical_error(plan_host.ratios(fitted_no_pp[test], a, b))
        print(f"fitted at {train} GPUs ({a:g}, {b:g}; error {e:.1%}) judged at {test} GPUs: typical error {held:.1%}")
    print()
    print("| GPUs | size | layout | ranks | measured ms | GPU timeline ms | before | host ms | after |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary: dict[str, tuple[list[float], list[float]]] = {}
    for world, items in table.items():
        seen = set()
        for size, layout, rank, r in items:
            before = r.gpu_step_us / r.measured_us
            after = plan_host.step_us(r.gpu_step_us, r.ops, r.collectives) / r.measured_us
            group = summary.setdefault(layout, ([], []))
            group[0].append(before)
            group[1].append(after)
            if (size, layout) in seen:
                continue
            seen.add((size, layout))
            print(f"| {world} | {size} | {layout} | from rank {rank} | {r.measured_us / 1e3:.1f} | "
                  f"{r.gpu_step_us / 1e3:.1f} | {before:.2f} | {plan_host.host_us(r.ops, r.collectives) / 1e3:.1f} | "
                  f"{after:.2f} |")
    print()
    print("| layout | rank rows | before: range | typical error | after: range | typical error |")
    print("|---|---|---|---|---|---|")
    everything = ([x for b, _ in summary.values() for x in b], [x for _, a in summary.values() for x in a])
    for layout, (before, after) in [*summary.items(), ("all", everything)]:
        print(f"| {layout} | {len(before)} | {min(before):.2f}-{max(before):.2f} | {plan_host.typical_error(before):.1%} | "
              f"{min(after):.2f}-{max(after):.2f} | {plan_host.typical_error(after):.1%} |")


if __name__ == "__main__":
    main()

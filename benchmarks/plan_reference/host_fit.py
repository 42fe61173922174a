"""Fit the plan's host launch model (simgpu/cuda_sim/plan_host.py) on recorded H200 runs and print
predicted/measured step time before (the GPU timeline alone) and after (max of it and the host time),
per layout, with a cross-check: constants fitted at one world size, judged at the other.

    python benchmarks/plan_reference/host_fit.py            # the committed plan33 results

Rows: every rank of every layout of step_reference.py's plan (the plan's last step of the layout) against
the H200s' median step (plan33-h200-x4-2026-11-26/steps.jsonl). The plans (PLANS, COMMANDS.md there):
`plan-g2/4`, every layout but the pipeline, every rank running; OP_US and COLLECTIVE_US are fitted on
these. `plan-g2/4-pp`, the pipeline layout with `--ranks` naming every rank (the stages wait for each
other's messages, so the GPU timeline holds the bubbles); P2P_US is fitted on these with the other two
held. Each is cross-checked across world sizes: fitted at one, judged at the other.
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
PLANS = Path(__file__).resolve().parents[1] / "results" / "plan33-rates-2core-2026-11-27"


def rows(results: Path, world: int, plan_dir: Path, planned_file: Path,
         steps_run: int = 3) -> list[tuple[str, str, int, plan_host.Row]]:
    """(size, layout, rank, Row) for every rank the GPU and the plan both recorded."""
    measured = {(r["size"], r["layout"]): r for r in compare._lines(results / "steps.jsonl")
                if r["environment"]["world"] == world}
    planned = compare._lines(planned_file)
    for record in planned:
        record["steps_run"] = steps_run
    steps = compare.predicted_steps(plan_dir, planned)
    out = []
    for record in planned:
        real = measured.get((record["size"], record["layout"]))
        if real is None:
            continue
        for rank, theirs in enumerate(real["ranks"]):
            step = steps.get((record["size"], record["layout"], rank))
            if step is None or "step_ms" not in theirs:
                continue
            gpu = step.get("gpu_step_us", step["step_us"])
            out.append((record["size"], record["layout"], rank,
                        plan_host.Row(step["ops"], step["collectives"], gpu, theirs["step_ms"] * 1e3, step.get("p2p", 0))))
    return out


def table(results: Path, plans: Path) -> dict[int, list[tuple[str, str, int, plan_host.Row]]]:
    """Per world size: the rows of every layout but pp (every rank ran), then pp's (planned with --ranks:
    bubbles on the timeline, messages counted)."""
    out = {}
    for world in (2, 4):
        plain = rows(results, world, plans / f"plan-g{world}", plans / f"plan-g{world}" / "steps.jsonl")
        piped = rows(results, world, plans / f"plan-g{world}-pp", plans / f"plan-g{world}-pp" / "steps.jsonl", steps_run=4)
        out[world] = [r for r in plain if r[1] != "pp"] + piped
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--plans", type=Path, default=PLANS)
    args = parser.parse_args()
    table_ = table(args.results, args.plans)
    fitted_no_pp = {w: [r for _, layout, _, r in table_[w] if layout != "pp"] for w in table_}
    fitted_pp = {w: [r for _, layout, _, r in table_[w] if layout == "pp"] for w in table_}
    op_us, coll_us, error = plan_host.fit(fitted_no_pp[2] + fitted_no_pp[4])
    print(f"fit over both world sizes, pp left out: OP_US={op_us:g} COLLECTIVE_US={coll_us:g} "
          f"(typical error {error:.1%}); plan_host has OP_US={plan_host.OP_US:g} COLLECTIVE_US={plan_host.COLLECTIVE_US:g}")
    for train, test in ((2, 4), (4, 2)):
        a, b, e = plan_host.fit(fitted_no_pp[train])
        held = plan_host.typical_error(plan_host.ratios(fitted_no_pp[test], a, b))
        print(f"fitted at {train} GPUs ({a:g}, {b:g}; error {e:.1%}) judged at {test} GPUs: typical error {held:.1%}")
    p2p_us, p2p_error = plan_host.fit_p2p(fitted_pp[2] + fitted_pp[4])
    print(f"pp rows, both world sizes: P2P_US={p2p_us:g} (typical error {p2p_error:.1%}); plan_host has "
          f"P2P_US={plan_host.P2P_US:g}")
    for train, test in ((2, 4), (4, 2)):
        c, e = plan_host.fit_p2p(fitted_pp[train])
        held = plan_host.typical_error(plan_host.ratios(fitted_pp[test], plan_host.OP_US, plan_host.COLLECTIVE_US, c))
        print(f"P2P_US fitted at {train} GPUs ({c:g}; error {e:.1%}) judged at {test} GPUs: typical error {held:.1%}")
    print()
    print("| GPUs | size | layout | ranks | measured ms | GPU timeline ms | before | host ms | after |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary: dict[str, tuple[list[float], list[float]]] = {}
    for world, items in table_.items():
        seen = set()
        for size, layout, rank, r in items:
            before = r.gpu_step_us / r.measured_us
            after = plan_host.step_us(r.gpu_step_us, r.ops, r.collectives, p2p=r.p2p) / r.measured_us
            group = summary.setdefault(layout, ([], []))
            group[0].append(before)
            group[1].append(after)
            if (size, layout) in seen and layout != "pp":  # a pipeline's stages differ: every rank
                continue
            seen.add((size, layout))
            print(f"| {world} | {size} | {layout} | {'' if layout == 'pp' else 'from '}rank {rank} | {r.measured_us / 1e3:.1f} | "
                  f"{r.gpu_step_us / 1e3:.1f} | {before:.2f} | {plan_host.host_us(r.ops, r.collectives, p2p=r.p2p) / 1e3:.1f} | "
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

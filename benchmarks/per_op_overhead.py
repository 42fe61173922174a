"""What the simulation adds to one op: CPU microseconds per call of a few small ops on a simulated GPU
(run it under `simgpu run`) or on the host without simulation (run it plainly with --device cpu).

    simgpu run --gpus 1 python benchmarks/per_op_overhead.py                 # simulated
    python benchmarks/per_op_overhead.py --device cpu                        # no simulation: the floor
    PYTHONPATH=/tmp/old-checkout simgpu run --gpus 1 python benchmarks/per_op_overhead.py   # another simgpu

Each figure is the least CPU time per call over many short batches (a batch preempted by other work on
a shared machine only loses); the tensors are tiny, so the figure is the per-call cost, not arithmetic.
`*_suspended` runs the same calls with the simulation suspended (the cost of its modes being there).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import torch


def per_call_us(fn: Callable[[], object], calls: int, batches: int) -> float:
    """The least CPU time of one call (microseconds) over `batches` batches of `calls` calls."""
    for _ in range(20):
        fn()
    best = float("inf")
    for _ in range(batches):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return round(best * 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (under simgpu run) or cpu (plain)")
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dev = args.device
    x = torch.randn(16, 16, device=dev)
    w = torch.randn(16, 16, device=dev, requires_grad=True)
    params = [torch.randn(64, device=dev) for _ in range(24)]
    cases: dict[str, tuple[Callable[[], object], int]] = {
        "add": (lambda: x + x, 150), "add_": (lambda: x.add_(0.0), 150), "view": (lambda: x.view(256), 150),
        "mm": (lambda: x @ x, 150), "fwd_bwd": (lambda: (x @ w).sum().backward(), 30),
        "foreach_add_24": (lambda: torch._foreach_add_(params, 1.0), 30),
    }
    out = {name: per_call_us(fn, calls, args.batches) for name, (fn, calls) in cases.items()}
    if dev != "cpu":
        from simgpu.cuda_sim import placement

        with placement.suspended():
            out["add_suspended"] = per_call_us(cases["add"][0], 150, args.batches)
    print(json.dumps({"device": dev, "torch": torch.__version__, "us_per_call": out}))


if __name__ == "__main__":
    main()

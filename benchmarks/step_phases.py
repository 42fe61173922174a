"""Where one process's training step spends its CPU: forward, backward, optimizer step and zero_grad of
simgpu_overhead.py's model (benchmarks/programs/train_step.py's blocks), each phase's thread CPU time
(least and median over the steps), the kernel's part and the minor page faults of a step.

    python benchmarks/step_phases.py --device cpu                          # plain: no simulation
    python benchmarks/step_phases.py --device cpu --adam foreach           # plain, AdamW as on a GPU
    simgpu run --gpus 1 python benchmarks/step_phases.py --device cuda     # simulated

One process and no collectives, so the figures are the ops' and the simulation's, without gloo or
the issuer thread. AdamW picks its foreach kernels for GPU tensors and its per-tensor loop for host
ones (torch.optim's default), so a simulated step runs the foreach path: `--adam foreach` gives the
plain side the same path, which separates that from the simulation's own cost. The least CPU time
over the steps is the figure to compare on a loaded machine (a step preempted or slowed only loses).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))
from train_step import Block  # noqa: E402 - the overhead benchmark's own model

PHASES = ("forward", "backward", "optimizer", "zero_grad", "step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (under simgpu run) or cpu (plain)")
    parser.add_argument("--adam", choices=["default", "foreach", "loop"], default="default",
                        help="AdamW's kernels: torch's choice for the device, foreach, or the per-tensor loop")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.width) for _ in range(args.layers)]).to(args.device)
    foreach = {"default": None, "foreach": True, "loop": False}[args.adam]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
    data = torch.randn(args.batch, 16, args.width).to(args.device)
    got: dict[str, list[float]] = {name: [] for name in (*PHASES, "sys", "minor_faults")}
    clock = time.thread_time
    for step in range(args.warmup + args.steps):
        usage, t0 = resource.getrusage(resource.RUSAGE_THREAD), clock()
        loss = model(data).pow(2).mean()
        t1 = clock()
        loss.backward()
        t2 = clock()
        optimizer.step()
        t3 = clock()
        optimizer.zero_grad()
        t4 = clock()
        loss.item()
        after = resource.getrusage(resource.RUSAGE_THREAD)
        if step >= args.warmup:
            for name, seconds in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)):
                got[name].append(seconds * 1e3)
            got["sys"].append((after.ru_stime - usage.ru_stime) * 1e3)
            got["minor_faults"].append(after.ru_minflt - usage.ru_minflt)
    print(json.dumps({"device": args.device, "adam": args.adam, "torch": torch.__version__,
                      "ms_least_median": {name: [round(min(v), 1), round(statistics.median(v), 1)]
                                          for name, v in got.items() if name != "minor_faults"},
                      "minor_faults_least_median": [min(got["minor_faults"]), statistics.median(got["minor_faults"])]}))


if __name__ == "__main__":
    main()

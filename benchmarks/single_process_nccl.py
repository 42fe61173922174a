#!/usr/bin/env python
"""One process driving every GPU through torch.cuda.nccl: the process model of nccl-tests' `-g N`.

Why: torch.distributed runs one process per GPU, nccl-tests (without MPI) one process for all GPUs.
Where the two disagree at a size, this script tells whether the process model (NCCL's transports and
tuning for intra-process peers) or torch.distributed's own path explains it: same NCCL, same torch,
one process. Timing: CUDA events on every GPU's current stream around `iters` back-to-back launches
after `warmup`; the slowest GPU's time counts; algbw/busbw as nccl-tests defines them.

    python benchmarks/single_process_nccl.py --gpus 4 --sizes 32M,128M,512M [--ops all_reduce,broadcast]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from simgpu.collective_facts import bus_factor

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # realgpu's size parser, whichever way the script is started
    sys.path.insert(0, str(REPO_ROOT))


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.cuda.nccl as nccl

    from realgpu.bench import parse_size

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    p.add_argument("--sizes", default="128M")
    p.add_argument("--ops", default="all_reduce,broadcast")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    n = args.gpus
    if n < 2 or n > torch.cuda.device_count():
        print(f"single_process_nccl: asked for {n} GPUs; it needs 2 or more and this machine has "
              f"{torch.cuda.device_count()}", file=sys.stderr)
        return 2
    factor = {op: bus_factor(op, n) for op in ("all_reduce", "broadcast")}
    rows = []
    print(f"# torch.cuda.nccl, one process, {n} GPUs, torch {torch.__version__}, NCCL "
          f"{'.'.join(map(str, torch.cuda.nccl.version()))}, {torch.cuda.get_device_name(0)}")
    print(f"# {'op':>10} {'size':>12} {'time(us)':>10} {'algbw':>8} {'busbw':>8}")
    for op in args.ops.split(","):
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            tensors = [torch.ones(size // 4, device=f"cuda:{i}") for i in range(n)]

            def launch(tensors: list = tensors) -> None:
                if op == "all_reduce":
                    nccl.all_reduce(tensors)
                else:
                    nccl.broadcast(tensors)

            for _ in range(args.warmup):
                launch()
            for i in range(n):
                torch.cuda.synchronize(i)
            begin = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            end = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            for i in range(n):
                with torch.cuda.device(i):
                    begin[i].record()
            for _ in range(args.iters):
                launch()
            for i in range(n):
                with torch.cuda.device(i):
                    end[i].record()
            for e in end:
                e.synchronize()
            time_us = max(b.elapsed_time(e) for b, e in zip(begin, end)) * 1e3 / args.iters
            algbw = size / (time_us * 1e-6) / 1e9
            rows.append({"op": op, "size": size, "gpus": n, "time_us": time_us, "algbw": algbw,
                         "busbw": algbw * factor[op]})
            print(f"  {op:>10} {size:>12} {time_us:>10.2f} {algbw:>8.2f} {algbw * factor[op]:>8.2f}", flush=True)
            del tensors
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

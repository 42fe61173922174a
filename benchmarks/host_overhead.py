#!/usr/bin/env python
"""Where the ~40 us of a small eager torch.distributed collective go: host time against GPU time, per layer.

Why: at 64 KB and below realgpu-bench's eager time is flat at ~40 us while nccl-tests' is 10-25 us.
This script, one process per GPU like torch.distributed, times the same all_reduce issued through
three layers, so the difference between two rows is one layer's cost:

  - `dist.all_reduce`  the public call (Python wrapper + ProcessGroupNCCL + NCCL)
  - `pg.allreduce`     ProcessGroupNCCL's C++ method directly, synchronous as the public call (no Python wrapper)
  - `graph`            the public call captured in a CUDA graph and replayed (GPU time only)
  - `add_`             one elementwise kernel: the floor of any launch from Python

For each it reports host_us (the host's time per call, no synchronisation inside the loop) and
gpu_us (CUDA events around the same loop, per call). host_us ~ gpu_us means the host sets the pace.
Run it under environment variants (flight recorder off, CUMEM off, ...) to see what each costs:

    python benchmarks/host_overhead.py --gpus 4 [--sizes 8,64K,1M] [--iters 200] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # realgpu's size parser, whichever way the script is started
    sys.path.insert(0, str(REPO_ROOT))


def _timed(launch, iters: int, torch) -> tuple[float, float]:
    """(host us per call, GPU us per call) over `iters` back-to-back launches after the queue drained."""
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        launch()
    host = time.perf_counter() - t0
    end.record()
    end.synchronize()
    return host * 1e6 / iters, begin.elapsed_time(end) * 1e3 / iters


def _rank(rank: int, n: int, port: int, sizes: list[int], iters: int, out: str | None) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            device_id=device)
    pg = dist.group.WORLD
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    if hasattr(opts, "asyncOp"):  # the public call's synchronous path (the options' default is async)
        opts.asyncOp = False
    rows = []
    for size in sizes:
        t = torch.ones(max(size // 4, 1), device=device)
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(5):
                dist.all_reduce(t)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            for _ in range(iters):
                dist.all_reduce(t)
        layers = {"dist.all_reduce": lambda: dist.all_reduce(t),
                  "pg.allreduce": lambda: pg.allreduce([t], opts),
                  "add_": lambda: t.add_(0)}
        for name, launch in layers.items():
            for _ in range(20):
                launch()
            dist.barrier(device_ids=[rank])
            host_us, gpu_us = _timed(launch, iters, torch)
            rows.append({"layer": name, "size": size, "host_us": host_us, "gpu_us": gpu_us})
        dist.barrier(device_ids=[rank])
        host_us, gpu_us = _timed(graph.replay, 1, torch)
        rows.append({"layer": "graph", "size": size, "host_us": host_us / iters, "gpu_us": gpu_us / iters})
        del graph
    gathered: list = [None] * n
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        env = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_NCCL", "TORCH_FR"))}
        print(f"# {n} GPUs, torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"env {env}; median over ranks")
        print(f"# {'layer':>16} {'size':>8} {'host_us':>8} {'gpu_us':>8}")
        summary = []
        for i, row in enumerate(rows):
            host = statistics.median(r[i]["host_us"] for r in gathered)
            gpu = statistics.median(r[i]["gpu_us"] for r in gathered)
            summary.append({**row, "host_us": host, "gpu_us": gpu, "gpus": n, "env": env})
            print(f"  {row['layer']:>16} {row['size']:>8} {host:>8.2f} {gpu:>8.2f}")
        if out:
            Path(out).write_text(json.dumps(summary, indent=1))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.multiprocessing as mp

    from realgpu.bench import parse_size

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--sizes", default="8,64K,1M")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--port", type=int, default=29533)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not 2 <= args.gpus <= torch.cuda.device_count():
        print(f"host_overhead: asked for {args.gpus} GPUs; it needs 2 or more and this machine has "
              f"{torch.cuda.device_count()}", file=sys.stderr)
        return 2
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    mp.spawn(_rank, args=(args.gpus, args.port, sizes, args.iters, args.json), nprocs=args.gpus, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

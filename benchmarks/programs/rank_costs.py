"""What one rank costs, for benchmarks/many_ranks.py: run under torchrun, plain (--device cpu --backend gloo)
or under `simgpu run` (cuda, nccl). Every rank prints one JSON line: seconds from the launch (BENCH_T0) to
its first collective's return, its training step times (DDP, a small MLP), the latency of a small
all_reduce, its unique memory (USS) and the bytes of its own tensors. Rank 0 then prints HOLD and the
ranks wait HOLD_S seconds, so that the benchmark can read the memory of every process of the run."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn

HOLD_S = 3.0


def uss_mb() -> float:
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[key] = int(value.split()[0])
    return (fields["Private_Clean"] + fields["Private_Dirty"]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--collectives", type=int, default=20)
    args = parser.parse_args()
    t0 = float(os.environ["BENCH_T0"])
    dist.init_process_group(args.backend)
    rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    probe = torch.ones(1, device=device)
    dist.all_reduce(probe)
    first = time.time() - t0

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.width, 4 * args.width), nn.GELU(), nn.Linear(4 * args.width, args.width)).to(device)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(8, args.width, device=device)
    steps = []
    for step in range(args.steps + 1):  # the first step is warm-up
        start = time.perf_counter()
        loss = model(data).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss.item()
        if step:
            steps.append(time.perf_counter() - start)

    small = torch.ones(1024, device=device)
    latencies = []
    for _ in range(args.collectives):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(small)
        latencies.append(time.perf_counter() - start)
    tensors = sum(p.numel() * p.element_size() * 2 for p in model.parameters())  # parameters and gradients
    tensors += sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
                   if isinstance(t, torch.Tensor))
    row = {"rank": rank, "pid": os.getpid(), "first_collective_s": first, "step_s": statistics.median(steps),
           "all_reduce_4KiB_s": statistics.median(latencies), "uss_mb": uss_mb(), "tensor_mb": tensors / 2**20,
           "loss": loss.item()}
    os.write(1, (json.dumps(row) + "\n").encode())
    dist.barrier()
    if rank == 0:
        os.write(1, b"HOLD\n")
    time.sleep(HOLD_S)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

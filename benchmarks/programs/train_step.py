"""One training program for simgpu's overhead benchmark: DDP or FSDP2 over N ranks (torchrun).

    torchrun --nproc-per-node 2 train_step.py --wrap ddp --device cpu --backend gloo     # plain CPU processes
    simgpu run --gpus 2 torchrun --nproc-per-node 2 train_step.py --wrap ddp             # simulated GPUs

Rank 0 prints one JSON line: the wall time of each timed step (forward, backward, optimizer step), and
the CPU time its process spent in it (every thread: the program's, gloo's, the simulator's issuer),
which a shared machine's load moves far less than the wall time, and of that CPU time the part spent
in the kernel with the minor page faults taken (memory the C library gave back to the system and
touches afresh: a large and variable share of a step on this program, simulated or not).
"""
import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wrap", choices=["ddp", "fsdp2"], required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--adam", choices=["default", "foreach"], default="default",
                        help="foreach: AdamW's foreach kernels whatever the device (torch's default picks them for "
                             "CUDA tensors only, so plain CPU runs take the per-tensor loop)")
    args = parser.parse_args()

    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(args.width) for _ in range(args.layers)]).to(device)
    if args.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    else:
        from torch.distributed.fsdp import fully_shard

        for block in model:
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"foreach": True} if args.adam == "foreach" else {}))
    data = torch.randn(args.batch, 16, args.width, generator=torch.Generator().manual_seed(rank)).to(device)
    times, cpu_times, sys_times, faults = [], [], [], []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        start, cpu_start, usage = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        loss = model(data).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss.item()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
            after = resource.getrusage(resource.RUSAGE_SELF)
            sys_times.append(after.ru_stime - usage.ru_stime)
            faults.append(after.ru_minflt - usage.ru_minflt)
    if rank == 0:
        print(json.dumps({"wrap": args.wrap, "device": args.device, "world": dist.get_world_size(),
                          "step_seconds": times, "step_cpu_seconds": cpu_times,
                          "step_sys_seconds": sys_times, "step_minor_faults": faults, "loss": loss.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

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
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def thread_cpu() -> dict[str, float]:
    """CPU seconds each live thread of this process has run (the kernel's scheduler figure, ns resolution),
    keyed by its name: Python's name for Python threads, the OS name (torch's and gloo's C++ threads) else,
    with the thread id to keep threads of one name apart; and under "<name> sys" the part of it spent in
    the kernel (/proc's stime, in clock ticks: 10 ms resolution)."""
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    got = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{task}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/self/task/{task}/stat") as f:
                stime = int(f.read().rsplit(")", 1)[1].split()[12]) / os.sysconf("SC_CLK_TCK")
        except OSError:  # the thread ended meanwhile
            continue
        # the process's own id is its main thread's (a rank forked from simgpu's template keeps the
        # template's main-thread id in Python's threading module)
        name = "MainThread" if int(task) == os.getpid() else python_names.get(int(task), comm)
        name = f"{name}/{task}"
        got[name], got[f"{name} sys"] = ns / 1e9, stime
    return got


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
    parser.add_argument("--thread-cpu", action="store_true",
                        help="also print the CPU time per timed step of each of rank 0's threads (thread_cpu)")
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
    threads_before: dict[str, float] = {}
    for step in range(args.warmup + args.steps):
        dist.barrier()
        if step == args.warmup and args.thread_cpu:
            threads_before = thread_cpu()
        if step == args.warmup and rank == 0 and os.environ.get("TRAIN_STEP_PIDFILE"):
            with open(os.environ["TRAIN_STEP_PIDFILE"], "w") as f:  # for a profiler to attach to the timed steps
                f.write(f"{os.getpid()}\n")
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
    per_thread = {}
    if args.thread_cpu:  # from the first timed step's start to the last one's end (barriers included)
        after_all = thread_cpu()
        per_thread = {"thread_cpu_per_step": {name: round((after_all[name] - threads_before.get(name, 0.0)) / args.steps, 5)
                                              for name in after_all}}
    if rank == 0:
        print(json.dumps({"wrap": args.wrap, "device": args.device, "world": dist.get_world_size(),
                          "step_seconds": times, "step_cpu_seconds": cpu_times,
                          "step_sys_seconds": sys_times, "step_minor_faults": faults, "loss": loss.item(),
                          **per_thread}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

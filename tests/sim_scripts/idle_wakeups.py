"""Under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: how often each thread of a simulated rank wakes
while the program computes on its own, its groups made and used (a DDP-like all_reduce and an async one
waited for). A thread that polls (a store wait with a short timeout, a loop over is_completed) wakes
many times a second and costs a step CPU on a machine with few cores, the more so the more ranks it
runs. Rank 0 prints one JSON line: per thread, its name and the context switches it made in the window."""
import json
import os
import threading
import time

import torch
import torch.distributed as dist

WINDOW_S = 1.5


def switches() -> dict[str, int]:
    """Every live thread's voluntary + involuntary context switches, keyed by name/tid."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    got = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/self/task/{task}/comm") as f:
                comm = f.read().strip()
        except OSError:  # ended meanwhile
            continue
        name = "MainThread" if int(task) == os.getpid() else names.get(int(task), comm)
        got[f"{name}/{task}"] = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
    return got


PLAIN = os.environ.get("IDLE_WAKEUPS_PLAIN") == "1"  # plain CPU processes with gloo: the same figures without simgpu
dist.init_process_group("gloo" if PLAIN else "nccl")
rank = dist.get_rank()
if not PLAIN:
    torch.cuda.set_device(rank)
x = torch.ones(1 << 16, device="cpu" if PLAIN else "cuda")
dist.all_reduce(x)
dist.all_reduce(x, async_op=True).wait()
for _ in range(int(os.environ.get("IDLE_WAKEUPS_GROUPS", "0"))):  # more groups, each used once (a mesh's)
    dist.all_reduce(x, group=dist.new_group())
dist.barrier()
before = switches()
start = time.perf_counter()
while time.perf_counter() - start < WINDOW_S:  # compute alone: no collective, no store call
    pass
after = switches()
dist.barrier()
if rank == 0:
    print(json.dumps({"window_s": WINDOW_S,
                      "wakeups": {name: after[name] - before[name] for name in after if name in before}}), flush=True)
dist.destroy_process_group()

"""Run on every node under `simgpu run --gpus G --sim-interface IFACE torchrun --nnodes N ... across_hosts.py MODE`.

mismatch: the last rank calls broadcast where every other rank calls all_reduce; every rank, on every
node, should raise CollectiveMismatch (and print it, with its rank and host).
steps: all_reduce a step counter for STEPS steps, 0.2 s apart, printing "step K" on each rank (a test
kills one node part way).
Both print "rank R secret D" first: D is a digest of the secret the rank signs its strict-check records
with (SIMGPU_GROUP_SECRET), so a test sees that every node agreed on one.
"""
import hashlib
import os
import socket
import sys
import time

import torch
import torch.distributed as dist


def main(mode: str) -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(4, device="cuda")
    if mode == "mismatch":
        dist.all_reduce(t)  # one that agrees first
        _print_secret(rank)
        try:
            if rank == world - 1:
                dist.broadcast(t, src=0)
            else:
                dist.all_reduce(t)
        except Exception as exc:
            print(f"rank {rank} on {socket.gethostname()}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
            sys.exit(3)
    elif mode == "steps":
        _print_secret(rank)
        for step in range(int(os.environ.get("STEPS", "200"))):
            dist.all_reduce(t)
            print(f"rank {rank} step {step}", flush=True)
            time.sleep(0.2)
    dist.destroy_process_group()


def _print_secret(rank: int) -> None:
    """A digest of the secret this rank signs its strict-check records with ("none": unsigned)."""
    secret = os.environ.get("SIMGPU_GROUP_SECRET", "")
    digest = hashlib.sha256(secret.encode()).hexdigest()[:12] if secret else "none"
    print(f"rank {rank} secret {digest}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

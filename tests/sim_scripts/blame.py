"""Run under `simgpu run --gpus 2 blame.py MODE RENDEZVOUS`: a program whose ranks do not meet.

hang: rank 1 sleeps (no collective, no error) while rank 0 waits in an all_reduce; the strict check
names rank 1 (issue 28: with --timeout, its deadline sits below the run's).
send_first: both ranks send before they receive, NUMEL elements (ProcessGroupNCCL's first send/recv
of a pair is a rendezvous: simgpu.p2p_pairs reports the 2-rank cycle as P2PDeadlock).
"""
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, mode: str, init: str, numel: int) -> None:
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    if mode == "hang":
        if rank == 1:
            time.sleep(3600)
        dist.all_reduce(torch.ones(1, device="cuda"))
    elif mode == "send_first":
        peer = 1 - rank
        dist.send(torch.ones(numel, device="cuda"), peer)
        dist.recv(torch.empty(numel, device="cuda"), peer)
    dist.destroy_process_group()


if __name__ == "__main__":
    numel = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    mp.spawn(worker, args=(sys.argv[1], f"file://{sys.argv[2]}", numel), nprocs=2)

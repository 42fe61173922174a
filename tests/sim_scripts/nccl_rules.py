"""Run under `simgpu run --gpus 2`: torch.distributed "nccl" on simulated GPUs, with NCCL's rules."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, init: str) -> None:
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    assert dist.get_backend() == "nccl", dist.get_backend()
    t = torch.full((3,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    assert t.get_device() == rank and t.tolist() == [3.0, 3.0, 3.0]
    objs = [None, None]
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": 0}, {"rank": 1}], objs
    try:
        dist.all_reduce(torch.ones(2))
    except RuntimeError as exc:
        assert "No backend type associated with device type cpu" in str(exc) and f"rank {rank}" in str(exc)
    else:
        raise AssertionError("NCCL refuses host tensors; the simulator must too")
    dist.destroy_process_group()
    if rank == 0:
        print("OK nccl_rules")


if __name__ == "__main__":
    mp.spawn(worker, args=(f"file://{sys.argv[1]}",), nprocs=2)

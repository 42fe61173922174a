"""Under `simgpu run --plan ... --ranks 0,1` (tests/test_plan.py): send_object_list / recv_object_list between the
sampled ranks, as torch 2.11's pipelining shape inference does. The pickled bytes travel as a uint8 GPU tensor with
data; a storage-less tensor inside the object pickles as zeros."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
# torch >= 2.14 reads a group's rank and size from its default backend: each sampled rank is its own rank
assert (rank, dist.get_world_size()) == (int(os.environ["RANK"]), 2), (rank, dist.get_world_size())
torch.cuda.set_device(rank)
if rank == 0:
    dist.send_object_list([{"shape": [3, 4], "x": torch.randn(2, device="cuda")}], dst=1)
else:
    got = [None]
    dist.recv_object_list(got, src=0)
    assert got[0]["shape"] == [3, 4] and got[0]["x"].shape == (2,), got
    assert bool((got[0]["x"].cpu() == 0).all()), got
    print("OK plan_send_object", flush=True)
dist.destroy_process_group()

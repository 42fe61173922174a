"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2 nccl_backend_names.py BACKEND`: torch 2.15's
NCCL variants ("nccl-lazy", "nccl2") and a device map without "cpu" ("cuda:nccl") are NCCL groups, which
refuse host tensors as NCCL does; "cpu:gloo,cuda:nccl" takes both."""
import os
import sys

import torch
import torch.distributed as dist

backend = sys.argv[1]
rank = int(os.environ["RANK"])
torch.cuda.set_device(rank)
dist.init_process_group(backend)
x = torch.ones(2, device="cuda")
dist.all_reduce(x)
assert x.tolist() == [2.0, 2.0], x
group = dist.new_group([0, 1], backend=backend)
dist.all_reduce(x, group=group)
assert x.tolist() == [4.0, 4.0], x
serves_host = "cpu" in backend
try:
    dist.all_reduce(torch.ones(2))
    took_host = True
except RuntimeError as exc:
    assert "No backend type associated with device type cpu" in str(exc), exc
    took_host = False
assert took_host == serves_host, (backend, took_host)
dist.barrier()
if rank == 0:
    print(f"OK nccl_backend_names {backend}", flush=True)
dist.destroy_process_group()

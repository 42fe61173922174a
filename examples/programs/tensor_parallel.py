"""Tensor parallelism, DeviceMesh first: init_device_mesh creates the process group (no explicit
init_process_group), parallelize_module shards an MLP with ColwiseParallel / RowwiseParallel,
AdamW trains the DTensor parameters. Every rank sees the same batch.

    torchrun --nproc-per-node 2 tensor_parallel.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

BATCH = 16
STEPS = 5


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(16, 64)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(64, 16)

    def forward(self, x):
        return self.out_proj(self.relu(self.in_proj(x)))


def main():
    world_size = int(os.environ["WORLD_SIZE"])
    device_type = torch.accelerator.current_accelerator().type
    tp_mesh = init_device_mesh(device_type, (world_size,))
    rank = tp_mesh.get_rank()

    torch.manual_seed(0)  # the same initial weights on every rank
    model = MLP().to(device_type)
    tp_model = parallelize_module(
        module=model,
        device_mesh=tp_mesh,
        parallelize_plan={
            "in_proj": ColwiseParallel(),
            "out_proj": RowwiseParallel(),
        },
    )
    optimizer = torch.optim.AdamW(tp_model.parameters(), lr=0.01, foreach=True)

    g = torch.Generator().manual_seed(17)
    for step in range(STEPS):
        inp = torch.randn(BATCH, 16, generator=g).to(device_type)
        target = torch.randn(BATCH, 16, generator=g).to(device_type)
        output = tp_model(inp)
        loss = F.mse_loss(output, target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)

    total = sum(p.full_tensor().sum() for p in tp_model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""FSDP2 with an explicit 1-D DeviceMesh: init_device_mesh("cuda", (world_size,)) passed as mesh=
to fully_shard on each block and on the root; AdamW; the trained parameters gathered with
full_tensor().

    torchrun --nproc-per-node 2 fsdp2_mesh.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

GLOBAL_BATCH = 32
STEPS = 5


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, dim=24, depth=3):
        super().__init__()
        self.inp = nn.Linear(6, dim)
        self.blocks = nn.ModuleList(ResidualBlock(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (world_size,))
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = Model().cuda()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)

    g = torch.Generator().manual_seed(21)
    x_all = torch.randn(STEPS, GLOBAL_BATCH, 6, generator=g)
    y_all = torch.randn(STEPS, GLOBAL_BATCH, 2, generator=g)
    for step in range(STEPS):
        x = x_all[step].chunk(world_size)[rank].cuda()
        y = y_all[step].chunk(world_size)[rank].cuda()
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)

    total = sum(p.full_tensor().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

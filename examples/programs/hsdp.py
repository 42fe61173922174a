"""FSDP1 HYBRID_SHARD on a 2-D device mesh: parameters sharded within each group of
world_size // 2 GPUs and replicated across the 2 groups. Run on 4 GPUs.

    torchrun --nproc-per-node 4 hsdp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

GLOBAL_BATCH = 16
STEPS = 4


class Layer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x + torch.relu(self.fc(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(10, 32)
        self.layers = nn.Sequential(*[Layer(32) for _ in range(3)])
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.layers(self.embed(x))).squeeze(-1)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    assert world_size % 2 == 0 and world_size >= 4, "run on 4 (or more, even) GPUs"
    mesh_2d = init_device_mesh("cuda", (2, world_size // 2))

    torch.manual_seed(0)
    model = Model().cuda()
    model = FSDP(model, device_mesh=mesh_2d, sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                 auto_wrap_policy=ModuleWrapPolicy({Layer}), device_id=local_rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)

    g = torch.Generator().manual_seed(99)
    w_true = torch.randn(10, generator=g)
    per_rank = GLOBAL_BATCH // world_size
    for step in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 10, generator=g)
        y = x @ w_true + 0.1 * torch.randn(GLOBAL_BATCH, generator=g)
        x, y = x[rank * per_rank:(rank + 1) * per_rank].cuda(), y[rank * per_rank:(rank + 1) * per_rank].cuda()
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)

    with FSDP.summon_full_params(model):
        total = sum(p.detach().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

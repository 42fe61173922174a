"""FSDP1: FullyShardedDataParallel with ShardingStrategy.FULL_SHARD, use_orig_params=True, a
size-based auto-wrap policy, Adam; the full parameters read back with summon_full_params.

    torchrun --nproc-per-node 2 fsdp1.py
"""
import functools
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import ShardingStrategy
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

GLOBAL_BATCH = 16
STEPS = 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(8 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(local_rank)

    torch.manual_seed(0)
    model = Net().to(local_rank)
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=1000)
    model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, auto_wrap_policy=policy,
                 device_id=torch.cuda.current_device(), use_orig_params=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)

    g = torch.Generator().manual_seed(8)
    per_rank = GLOBAL_BATCH // world_size
    model.train()
    for step in range(STEPS):
        data = torch.randn(GLOBAL_BATCH, 1, 12, 12, generator=g)
        target = torch.randint(0, 10, (GLOBAL_BATCH,), generator=g)
        data = data[rank * per_rank:(rank + 1) * per_rank].to(local_rank)
        target = target[rank * per_rank:(rank + 1) * per_rank].to(local_rank)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target, reduction="sum")
        loss.backward()
        optimizer.step()
        ddp_loss = torch.zeros(2).to(local_rank)
        ddp_loss[0] += loss.item()
        ddp_loss[1] += len(data)
        dist.all_reduce(ddp_loss, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"step {step} loss {(ddp_loss[0] / ddp_loss[1]).item():.6f}", flush=True)

    with FSDP.summon_full_params(model):
        total = sum(p.detach().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

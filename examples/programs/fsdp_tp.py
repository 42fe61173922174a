"""2-D parallelism as in PyTorch's fsdp_tp_example: a (dp, tp) DeviceMesh, tensor parallelism
inside each block on the "tp" dimension, FSDP2 (fully_shard) on the "dp" dimension. Run on 4 GPUs
(2 x 2).

    torchrun --nproc-per-node 4 fsdp_tp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

TP_SIZE = 2
GLOBAL_BATCH = 16
STEPS = 4
DIM = 32


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, 4 * DIM, bias=False)
        self.w3 = nn.Linear(DIM, 4 * DIM, bias=False)
        self.w2 = nn.Linear(4 * DIM, DIM, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        return x + self.feed_forward(self.norm(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(10, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(2))
        self.out = nn.Linear(DIM, 3)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def main():
    world_size = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    assert world_size % TP_SIZE == 0 and world_size > TP_SIZE, f"needs a multiple of {TP_SIZE} GPUs, at least {2 * TP_SIZE}"
    dp_size = world_size // TP_SIZE
    device_mesh = init_device_mesh("cuda", (dp_size, TP_SIZE), mesh_dim_names=("dp", "tp"))
    tp_mesh, dp_mesh = device_mesh["tp"], device_mesh["dp"]
    dp_rank = dp_mesh.get_local_rank()
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = Model().to("cuda")
    for layer in model.layers:
        parallelize_module(layer, tp_mesh, {
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
        })
        fully_shard(layer, mesh=dp_mesh)
    model = fully_shard(model, mesh=dp_mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, foreach=True)

    g = torch.Generator().manual_seed(4)
    per_dp = GLOBAL_BATCH // dp_size
    for step in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 10, generator=g)
        y = torch.randint(0, 3, (GLOBAL_BATCH,), generator=g)
        x = x[dp_rank * per_dp:(dp_rank + 1) * per_dp].cuda()
        y = y[dp_rank * per_dp:(dp_rank + 1) * per_dp].cuda()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG, group=dp_mesh.get_group())
        if rank == 0:
            print(f"step {step} loss {logged.item():.6f}", flush=True)

    total = sum(p.full_tensor().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Sequence parallelism as in PyTorch's sequence_parallel_example: each rank holds a slice of the
sequence; SequenceParallel runs the LayerNorm on the slices, ColwiseParallel(input_layouts=Shard(1))
gathers the sequence for the first projection, RowwiseParallel(output_layouts=Shard(1))
reduce-scatters it back to sequence slices.

    torchrun --nproc-per-node 2 sequence_parallel.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

BATCH, SEQ, DIM = 4, 16, 16
STEPS = 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.in_proj = nn.Linear(DIM, 4 * DIM)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return x + self.out_proj(self.relu(self.in_proj(self.norm(x))))


def main():
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device_mesh = init_device_mesh("cuda", (world_size,))
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = Block().to("cuda")
    sp_model = parallelize_module(
        module=model,
        device_mesh=device_mesh,
        parallelize_plan={
            "norm": SequenceParallel(),
            "in_proj": ColwiseParallel(input_layouts=Shard(1)),
            "out_proj": RowwiseParallel(output_layouts=Shard(1)),
        },
    )
    optimizer = torch.optim.AdamW(sp_model.parameters(), lr=0.02)

    g = torch.Generator().manual_seed(2)
    for step in range(STEPS):
        # the global batch is the same everywhere; each rank keeps its slice of the sequence
        inp = torch.randn(BATCH, SEQ, DIM, generator=g)
        target = torch.randn(BATCH, SEQ, DIM, generator=g)
        inp = inp.chunk(world_size, dim=1)[rank].cuda()
        target = target.chunk(world_size, dim=1)[rank].cuda()
        output = sp_model(inp)
        # mean over the whole (global) sequence: every rank adds its slice's share
        loss = F.mse_loss(output, target, reduction="sum") / (BATCH * SEQ * DIM)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        if rank == 0:
            print(f"step {step} loss {logged.item():.6f}", flush=True)

    total = sum(p.full_tensor().sum() for p in sp_model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

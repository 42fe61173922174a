"""Pipeline parallelism with several stages per GPU, as large-model trainers run it: the model cut
into 2 stages per rank, built from the full model's state (every rank initialises the same model and
keeps its stages), a multi-stage schedule picked by name (Interleaved1F1B, InterleavedZeroBubble,
ZBVZeroBubble with its V-shaped stage placement, LoopedBFS), gradient clipping over all stages,
AdamW with a LambdaLR warm-up.

    torchrun --nproc-per-node 2 pipeline_schedules.py [SCHEDULE]
"""
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.pipelining as pipelining
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage

N_LAYERS = 8
DIM = 16
BATCH = 16
N_MICROBATCHES = 4
STEPS = 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.fc = nn.Linear(DIM, DIM)

    def forward(self, x):
        return x + torch.tanh(self.fc(self.norm(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, DIM)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(N_LAYERS)})
        self.head = nn.Linear(DIM, 2)

    def forward(self, x):
        h = self.embed(x) if self.embed is not None else x
        for layer in self.layers.values():
            h = layer(h)
        return self.head(h) if self.head is not None else h


def loss_fn(outputs, targets):
    return F.mse_loss(outputs, targets)


def stage_indices(rank, world_size, schedule_name):
    """Loop placement (stage s on rank s % world_size), or V placement for ZBV (rank r holds r and
    2 * world_size - 1 - r)."""
    if schedule_name == "ZBVZeroBubble":
        return [rank, 2 * world_size - 1 - rank]
    return [rank, rank + world_size]


def build_stage(full, index, n_stages, device):
    part = copy.deepcopy(full)
    per_stage = N_LAYERS // n_stages
    for i in range(N_LAYERS):
        if not index * per_stage <= i < (index + 1) * per_stage:
            del part.layers[str(i)]
    if index != 0:
        part.embed = None
    if index != n_stages - 1:
        part.head = None
    return part.to(device)


def main():
    schedule_name = sys.argv[1] if len(sys.argv) > 1 else "Interleaved1F1B"
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    n_stages = 2 * world_size
    assert N_LAYERS % n_stages == 0

    torch.manual_seed(0)
    full = Model()
    indices = stage_indices(rank, world_size, schedule_name)
    parts = [build_stage(full, i, n_stages, device) for i in indices]
    del full
    stages = [PipelineStage(part, i, n_stages, device) for part, i in zip(parts, indices)]
    schedule_class = getattr(pipelining, f"Schedule{schedule_name}")
    schedule = schedule_class(stages, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)

    params = [p for part in parts for p in part.parameters()]
    optimizer = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 2))
    holds_last = (n_stages - 1) in indices

    g = torch.Generator().manual_seed(61)
    for step in range(STEPS):
        x = torch.randn(BATCH, 6, generator=g).to(device)
        y = torch.randn(BATCH, 2, generator=g).to(device)
        optimizer.zero_grad()
        losses = [] if holds_last else None
        if 0 in indices:
            schedule.step(x, target=y if holds_last else None, losses=losses)
        else:
            schedule.step(target=y if holds_last else None, losses=losses)
        # the global gradient norm: each rank's squared norm, summed over ranks
        local_sq = sum(p.grad.pow(2).sum() for p in params if p.grad is not None)
        dist.all_reduce(local_sq)
        scale = torch.clamp(1.0 / (local_sq.sqrt() + 1e-6), max=1.0)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)
        optimizer.step()
        scheduler.step()
        if holds_last:
            print(f"step {step} loss {torch.stack(losses).mean().item():.6f}", flush=True)

    total = sum(p.detach().sum() for p in params)
    dist.all_reduce(total)
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Pipeline parallelism with torch.distributed.pipelining, as in PyTorch's pipelining tutorial:
the model split by hand into one stage per GPU, each stage wrapped in PipelineStage, trained with
ScheduleGPipe over 4 microbatches (the loss lives on the last stage).

    torchrun --nproc-per-node 2 pipeline.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

N_LAYERS = 4
DIM = 16
BATCH = 16
N_MICROBATCHES = 4
STEPS = 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, DIM)
        self.layers = nn.ModuleDict({str(i): nn.Sequential(nn.Linear(DIM, DIM), nn.Tanh()) for i in range(N_LAYERS)})
        self.head = nn.Linear(DIM, 2)

    def forward(self, x):
        h = self.embed(x) if self.embed is not None else x
        for layer in self.layers.values():
            h = layer(h)
        return self.head(h) if self.head is not None else h


def tokenwise_loss_fn(outputs, targets):
    return F.mse_loss(outputs, targets)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    assert N_LAYERS % world_size == 0

    torch.manual_seed(0)
    model = Model()
    # keep only this stage's part of the model
    per_stage = N_LAYERS // world_size
    for i in range(N_LAYERS):
        if not rank * per_stage <= i < (rank + 1) * per_stage:
            del model.layers[str(i)]
    if rank != 0:
        model.embed = None
    if rank != world_size - 1:
        model.head = None
    model.to(device)

    stage = PipelineStage(model, rank, world_size, device)
    schedule = ScheduleGPipe(stage, n_microbatches=N_MICROBATCHES, loss_fn=tokenwise_loss_fn)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)

    g = torch.Generator().manual_seed(6)
    for step in range(STEPS):
        x = torch.randn(BATCH, 6, generator=g).to(device)
        y = torch.randn(BATCH, 2, generator=g).to(device)
        optimizer.zero_grad()
        if rank == 0:
            schedule.step(x)
        elif rank == world_size - 1:
            losses = []
            schedule.step(target=y, losses=losses)
            print(f"step {step} loss {torch.stack(losses).mean().item():.6f}", flush=True)
        else:
            schedule.step()
        optimizer.step()

    total = sum(p.detach().sum() for p in model.parameters())
    dist.all_reduce(total)
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

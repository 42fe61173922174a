"""Distributed checkpointing of an FSDP2 model: train, save model and optimizer state with
torch.distributed.checkpoint (get_state_dict / dcp.save) into a directory, build a fresh sharded
model and optimizer, load the checkpoint into them (dcp.load / set_state_dict), continue training.

    torchrun --nproc-per-node 2 dcp_checkpoint.py [CHECKPOINT_DIR]
"""
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

GLOBAL_BATCH = 16
STEPS_BEFORE, STEPS_AFTER = 3, 2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 32), nn.Linear(32, 32), nn.Linear(32, 32)])
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x).squeeze(-1)


def build(device):
    torch.manual_seed(0)
    model = Model().to(device)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, optimizer


def train(model, optimizer, steps, first_step, data, rank, world_size):
    per_rank = GLOBAL_BATCH // world_size
    for step in range(first_step, first_step + steps):
        x, y = data[step]
        x = x[rank * per_rank:(rank + 1) * per_rank].cuda()
        y = y[rank * per_rank:(rank + 1) * per_rank].cuda()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        logged = loss.detach()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {logged.item():.6f}", flush=True)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)

    # every rank must write to the same directory
    if len(sys.argv) > 1:
        ckpt_dir, cleanup = sys.argv[1], False
    else:
        holder = [tempfile.mkdtemp(prefix="dcp_") if rank == 0 else None]
        dist.broadcast_object_list(holder, src=0)
        ckpt_dir, cleanup = holder[0], True

    g = torch.Generator().manual_seed(31)
    data = []
    for _ in range(STEPS_BEFORE + STEPS_AFTER):
        x = torch.randn(GLOBAL_BATCH, 8, generator=g)
        data.append((x, x.sum(-1).sin()))

    model, optimizer = build(device)
    train(model, optimizer, STEPS_BEFORE, 0, data, rank, world_size)

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=ckpt_dir)
    del model, optimizer

    model, optimizer = build(device)
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=ckpt_dir)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    train(model, optimizer, STEPS_AFTER, STEPS_BEFORE, data, rank, world_size)

    total = sum(p.full_tensor().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.barrier()
    if cleanup and rank == 0:
        shutil.rmtree(ckpt_dir)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Fault-tolerant training with asynchronous distributed checkpoints, as pretraining frameworks do it:
an FSDP2 model whose model, optimizer, LR scheduler, data position and random states form one
Stateful application state; torch.distributed.checkpoint.async_save while training goes on (its
future awaited before the next save), then a restart: everything rebuilt fresh, dcp.load of the
last checkpoint, and training resumed from the saved data position; the resumed run must repeat the
uninterrupted run's losses exactly.

    torchrun --nproc-per-node 2 dcp_async_resume.py CHECKPOINT_DIR [thread|process]
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

GLOBAL_BATCH = 16
STEPS = 6
SAVE_AT = (1, 3)       # checkpoints after these steps
CRASH_AFTER = 4        # the first run stops after this step; the restart resumes from step 3's checkpoint


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(10, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 32), nn.GELU()) for _ in range(2))
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


class ResumableSampler(DistributedSampler):
    """A DistributedSampler that can skip what was consumed (torchdata's StatefulDistributedSampler)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.consumed = 0

    def __iter__(self):
        indices = list(super().__iter__())
        return iter(indices[self.consumed:])

    def state_dict(self):
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state):
        self.epoch, self.consumed = state["epoch"], state["consumed"]


class AppState(Stateful):
    def __init__(self, model, optimizer, scheduler, sampler):
        self.model, self.optimizer, self.scheduler, self.sampler = model, optimizer, scheduler, sampler
        self.step = 0

    def state_dict(self):
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optim_state, "scheduler": self.scheduler.state_dict(),
                "sampler": self.sampler.state_dict(), "step": self.step,
                "rng": {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state()}}

    def load_state_dict(self, state):
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        self.step = state["step"]
        torch.set_rng_state(state["rng"]["cpu"])
        torch.cuda.set_rng_state(state["rng"]["cuda"])


def dataset():
    g = torch.Generator().manual_seed(404)
    x = torch.randn(GLOBAL_BATCH * STEPS, 10, generator=g)
    return TensorDataset(x, (x[:, :4] * x[:, 4:8]).tanh())


def build(device, rank, world_size):
    torch.manual_seed(0)
    model = Model().to(device)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    sampler = ResumableSampler(dataset(), num_replicas=world_size, rank=rank, shuffle=True, seed=3)
    return AppState(model, optimizer, scheduler, sampler)


def train(app, device, until, checkpoint_dir, checkpointer, record):
    per_rank = GLOBAL_BATCH // dist.get_world_size()
    loader = DataLoader(app.sampler.dataset, batch_size=per_rank, sampler=app.sampler)
    pending = None
    for x, y in loader:
        if app.step >= until:
            break
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.mse_loss(app.model(x), y)
        loss.backward()
        app.optimizer.step()
        app.scheduler.step()
        app.optimizer.zero_grad()
        app.sampler.consumed += per_rank
        logged = loss.detach()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
        record(app.step, logged.item())
        app.step += 1
        if app.step - 1 in SAVE_AT:
            if pending is not None:
                pending.result()
            pending = dcp.async_save({"app": app}, checkpoint_id=os.path.join(checkpoint_dir, f"step{app.step}"),
                                     async_checkpointer_type=checkpointer)
    if pending is not None:
        pending.result()


def main():
    checkpoint_dir = sys.argv[1]
    checkpointer = AsyncCheckpointerType(sys.argv[2] if len(sys.argv) > 2 else "thread")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("cuda:nccl,cpu:gloo")   # async_save's collectives run on the CPU group
    rank, world_size = dist.get_rank(), dist.get_world_size()

    first = {}
    train(build(device, rank, world_size), device, CRASH_AFTER, checkpoint_dir, checkpointer,
          lambda step, loss: first.__setitem__(step, loss))

    # the restart: fresh objects, the last checkpoint, the rest of the epoch
    app = build(device, rank, world_size)
    last = max(SAVE_AT) + 1
    dcp.load({"app": app}, checkpoint_id=os.path.join(checkpoint_dir, f"step{last}"))
    assert app.step == last, app.step
    resumed = {}
    train(app, device, STEPS, checkpoint_dir + "-after", checkpointer, lambda step, loss: resumed.__setitem__(step, loss))

    for step in range(last, CRASH_AFTER):
        assert resumed[step] == first[step], f"step {step}: resumed {resumed[step]} != uninterrupted {first[step]}"
    losses = {**first, **resumed}
    final = sum(p.full_tensor().sum() for p in app.model.parameters())
    if rank == 0:
        for step in range(STEPS):
            print(f"step {step} loss {losses[step]:.6f}", flush=True)
        print(f"final {final.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

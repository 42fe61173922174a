"""Float16 mixed precision the way trainer libraries drive it: DDP over a torch.compile'd model, the
forward under torch.autocast("cuda", float16), torch.amp.GradScaler starting from a scale so large that
the first step overflows (its optimizer step is skipped and the scale backs off, as in any fp16
run's first steps), unscale_ before gradient clipping, the scaler's state saved and restored midway,
the loss logged with dist.reduce to rank 0.

    torchrun --nproc-per-node 2 amp_fp16_compile.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 32
STEPS = 8
INIT_SCALE = 2.0 ** 30      # overflows for sure: the first step is skipped
BACKOFF = 2.0 ** -18        # then 4096, far from overflow on any number of GPUs


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.norm = nn.LayerNorm(64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 5)

    def forward(self, x):
        h = F.gelu(self.norm(self.fc1(x)))
        return self.fc3(F.relu(self.fc2(h)) + h)


def data(g):
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 20, generator=g)
        yield x, (x[:, :5] * 3).argmax(-1)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = DDP(torch.compile(Model().to(device)), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda", init_scale=INIT_SCALE, backoff_factor=BACKOFF, growth_interval=3)

    per_rank = GLOBAL_BATCH // world_size
    skipped = 0
    for step, (x, y) in enumerate(data(torch.Generator().manual_seed(77))):
        x = x[rank * per_rank:(rank + 1) * per_rank].to(device, non_blocking=True)
        y = y[rank * per_rank:(rank + 1) * per_rank].to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(x)
            assert logits.dtype == torch.float16, logits.dtype
            loss = F.cross_entropy(logits, y)
        assert loss.dtype == torch.float32, loss.dtype
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        skipped += scaler.get_scale() < scale
        optimizer.zero_grad(set_to_none=True)
        if step == STEPS // 2:   # a checkpoint of the scaler, restored into a fresh one
            state = scaler.state_dict()
            scaler = torch.amp.GradScaler("cuda")
            scaler.load_state_dict(state)
        logged = loss.detach().clone()
        dist.reduce(logged, dst=0, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"step {step} loss {logged.item() / world_size:.6f}", flush=True)
            print(f"scale {step} {scaler.get_scale():.0f}", flush=True)

    final = sum(p.detach().float().sum() for p in model.parameters())
    if rank == 0:
        print(f"skipped {skipped}", flush=True)
        print(f"final {final.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

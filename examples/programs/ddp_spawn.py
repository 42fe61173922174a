"""DDP, tutorial style: mp.spawn, MASTER_ADDR/MASTER_PORT, model.to(rank), DistributedSampler,
SGD with momentum; a checkpoint saved by rank 0 and loaded on every rank with map_location, then
training resumes.

    python ddp_spawn.py [PORT]
"""
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

GLOBAL_BATCH = 16
STEPS = 5          # one epoch: 5 * GLOBAL_BATCH samples
RESUME_AT = 3


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def make_dataset():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(GLOBAL_BATCH * STEPS, 10, generator=g)
    y = torch.randn(GLOBAL_BATCH * STEPS, 5, generator=g)
    return TensorDataset(x, y)


def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def cleanup():
    dist.destroy_process_group()


def build(rank):
    torch.manual_seed(0)
    model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=[rank])
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    return ddp_model, optimizer


def train_step(step, rank, world_size, ddp_model, optimizer, loss_fn, inputs, labels):
    inputs, labels = inputs.to(rank), labels.to(rank)
    optimizer.zero_grad()
    loss = loss_fn(ddp_model(inputs), labels)
    loss.backward()
    optimizer.step()
    logged = loss.detach().clone()
    dist.all_reduce(logged, op=dist.ReduceOp.SUM)
    if rank == 0:
        print(f"step {step} loss {logged.item() / world_size:.6f}", flush=True)


def demo_checkpoint(rank, world_size, port, ckpt_path):
    setup(rank, world_size, port)

    dataset = make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=7)
    sampler.set_epoch(0)
    loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // world_size, sampler=sampler)
    loss_fn = nn.MSELoss()

    ddp_model, optimizer = build(rank)
    batches = iter(loader)
    for step in range(RESUME_AT):
        inputs, labels = next(batches)
        train_step(step, rank, world_size, ddp_model, optimizer, loss_fn, inputs, labels)

    if rank == 0:
        torch.save({"model": ddp_model.state_dict(), "optimizer": optimizer.state_dict()}, ckpt_path)
    dist.barrier()

    # a fresh model and optimizer, restored from the checkpoint
    ddp_model, optimizer = build(rank)
    map_location = {"cuda:0": f"cuda:{rank}"}
    checkpoint = torch.load(ckpt_path, map_location=map_location)
    ddp_model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])

    for step in range(RESUME_AT, STEPS):
        inputs, labels = next(batches)
        train_step(step, rank, world_size, ddp_model, optimizer, loss_fn, inputs, labels)

    total = sum(p.detach().sum() for p in ddp_model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)

    dist.barrier()
    if rank == 0:
        os.remove(ckpt_path)
    cleanup()


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    assert n_gpus >= 2, f"Requires at least 2 GPUs to run, but got {n_gpus}"
    port = int(sys.argv[1]) if len(sys.argv) > 1 else free_port()
    ckpt_dir = tempfile.mkdtemp()
    mp.spawn(demo_checkpoint, args=(n_gpus, port, os.path.join(ckpt_dir, "model.checkpoint")), nprocs=n_gpus, join=True)
    os.rmdir(ckpt_dir)

"""A trainer-library-style DDP loop: mp.spawn, a DataLoader with worker processes and pinned memory
whose batches are copied on a side stream (a prefetcher), DDP with gradient_as_bucket_view, gradient accumulation under no_sync, ZeroRedundancyOptimizer (ZeRO-1),
dist.barrier(device_ids=...), NVTX ranges, and the device queries such trainers make first
(get_device_properties, is_bf16_supported, mem_get_info, memory statistics).

    python ddp_trainer.py [PORT]
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

GLOBAL_BATCH = 16     # per optimizer step, over all ranks and accumulation steps
ACCUMULATION = 2
STEPS = 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 48)
        self.norm = nn.LayerNorm(48)
        self.fc2 = nn.Linear(48, 3)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


def dataset():
    g = torch.Generator().manual_seed(2024)
    x = torch.randn(GLOBAL_BATCH * STEPS, 12, generator=g)
    y = torch.randint(0, 3, (GLOBAL_BATCH * STEPS,), generator=g)
    return TensorDataset(x, y)


class Prefetcher:
    """Copies the next batch to the GPU on a side stream while the current one computes."""

    def __init__(self, loader, device):
        self.batches = iter(loader)
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.next = None
        self._load()

    def _load(self):
        try:
            x, y = next(self.batches)
        except StopIteration:
            self.next = None
            return
        with torch.cuda.stream(self.stream):
            self.next = (x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))

    def __iter__(self):
        return self

    def __next__(self):
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        if self.next is None:
            raise StopIteration
        x, y = self.next
        x.record_stream(torch.cuda.current_stream(self.device))
        y.record_stream(torch.cuda.current_stream(self.device))
        self._load()
        return x, y


def device_report(device):
    """What trainers check before they pick a batch size or a precision."""
    props = torch.cuda.get_device_properties(device)
    free, total = torch.cuda.mem_get_info(device)
    assert props.total_memory == total and 0 < free <= total, (props.total_memory, free, total)
    assert props.multi_processor_count > 0 and props.major >= 7, props
    assert torch.cuda.get_device_capability(device) == (props.major, props.minor)
    assert torch.cuda.is_bf16_supported() == (props.major >= 8)
    return props


def worker(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    device = torch.device(f"cuda:{rank}")
    props = device_report(device)
    if rank == 0:
        print(f"# {props.name}, {props.total_memory // 2**20} MiB, bf16 {torch.cuda.is_bf16_supported()}",
              flush=True)

    torch.manual_seed(0)
    model = DDP(Model().to(device), device_ids=[rank], gradient_as_bucket_view=True)
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-2,
                                        weight_decay=0.01)

    data = dataset()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=False)
    micro = GLOBAL_BATCH // world_size // ACCUMULATION
    loader = DataLoader(data, batch_size=micro, sampler=sampler, num_workers=2, pin_memory=True,
                        persistent_workers=False)
    torch.cuda.reset_peak_memory_stats(device)

    batches = Prefetcher(loader, device)
    for step in range(STEPS):
        torch.cuda.nvtx.range_push(f"step {step}")
        total = torch.zeros((), device=device)
        for micro_step in range(ACCUMULATION):
            x, y = next(batches)
            last = micro_step == ACCUMULATION - 1
            with torch.cuda.nvtx.range("forward-backward"):
                if last:
                    loss = F.cross_entropy(model(x), y) / ACCUMULATION
                    loss.backward()
                else:
                    with model.no_sync():
                        loss = F.cross_entropy(model(x), y) / ACCUMULATION
                        loss.backward()
            total += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.nvtx.range_pop()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {total.item():.6f}", flush=True)

    stats = torch.cuda.memory_stats(device)
    assert stats["allocated_bytes.all.peak"] == torch.cuda.max_memory_allocated(device) > 0, stats
    optimizer.consolidate_state_dict(to=0)
    if rank == 0:
        state = optimizer.state_dict()
        assert len(state["state"]) == len(list(model.parameters())), "consolidated state is incomplete"
    dist.barrier(device_ids=[rank])
    final = sum(p.detach().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {final.item():.8e}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    port = int(sys.argv[1]) if len(sys.argv) > 1 else free_port()
    mp.spawn(worker, args=(world_size, port), nprocs=world_size, join=True)

"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: how long a collective's work lives.

A work that C++ holds alone is still there when C++ asks for it: DDP's reducer, under Join with
uneven inputs and divide_by_initial_world_size=False, waits on the forward pass's all-reduce and then
reads its result. And a collective that has completed holds none of its tensors for long, so a
training loop's GPU memory stays flat (FSDP2's all-gather and reduce-scatter buffers once stayed
referenced by finished works: 4 ranks of a small FSDP+TP Llama ran out of host memory after a few
steps)."""
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
MB = 1 << 20

# Join: rank 1 has one input more; the joined rank shadows its collectives
torch.manual_seed(0)
model = DDP(nn.Linear(1, 1).cuda(), device_ids=[rank])
zero = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=0.01)
seen = 0
with Join([model, zero], divide_by_initial_world_size=False):
    for _ in range(5 + rank):
        seen += 1
        model(torch.ones(1, device="cuda")).sum().backward()
        zero.step()
assert seen == 5 + rank
weights = [torch.zeros(2, device="cuda") for _ in range(world)]
dist.all_gather(weights, torch.cat([model.module.weight.detach().view(-1), model.module.bias.detach()]))
assert all(torch.equal(w, weights[0]) for w in weights), weights


def collectives(step: int) -> None:
    """Async collectives on fresh 4 MB buffers, waited and dropped, as FSDP does every layer."""
    shard = torch.full((MB // 4,), float(step), device="cuda")
    full = torch.empty(world * shard.numel(), device="cuda")
    dist.all_gather_into_tensor(full, shard, async_op=True).wait()
    out = torch.empty_like(shard)
    dist.reduce_scatter_tensor(out, full, async_op=True).wait()
    dist.all_reduce(out)
    assert out[0].item() == step * world * world, out[0]


for step in range(10):  # the few works kept after completion are kept from here on
    collectives(step)
baseline = torch.cuda.memory_allocated()
for step in range(10, 40):
    collectives(step)
assert torch.cuda.memory_allocated() <= baseline + 4 * MB, (baseline, torch.cuda.memory_allocated())

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6 has FSDP2 only under _composable
    fully_shard = None
if fully_shard is not None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 1024), nn.ReLU(), nn.Linear(1024, 128)).cuda()
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    used = []
    for _ in range(6):
        model(torch.randn(64, 128, device="cuda")).sum().backward()
        opt.step()
        opt.zero_grad()
        used.append(torch.cuda.memory_allocated())
    assert used[-1] <= used[2] + MB, used



def settled() -> int:
    """memory_allocated once the transport's threads have let go of the last operation (on CUDA the
    program's drop frees at once; here gloo's thread may end its bookkeeping a moment later)."""
    for _ in range(50):
        if torch.cuda.memory_allocated() == before:
            break
        time.sleep(0.02)
    return torch.cuda.memory_allocated()


# Exactly nothing stays allocated once the program drops a collective's tensors, as on CUDA: not after
# the Python API's synchronous calls, nor after a functional collective (DTensor's full_tensor), nor after
# an async handle waited by its holder. Kept works had held 16 collectives' tensors: after a state dict's
# full weights were broadcast from rank 0, rank 0 held 16 of them (PyTorch's
# test_setting_meta_device_model_broadcasting_and_memory failed simulated, passed on 4 H200s).
from torch.distributed._functional_collectives import all_gather_tensor  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import Shard, distribute_tensor  # noqa: E402

mesh = init_device_mesh("cuda", (world,))
before = torch.cuda.memory_allocated()
for _ in range(20):
    t = torch.ones(MB, device="cuda")
    dist.broadcast(t, 0)
    gathered = torch.empty(world * MB, device="cuda")
    dist.all_gather_into_tensor(gathered, t)
    dist.all_reduce(t, async_op=True).wait()
    assert all_gather_tensor(t, 0, mesh).sum().item() == world * MB * world
    assert distribute_tensor(torch.ones(world, MB), mesh, [Shard(0)]).full_tensor().shape == (world, MB)
    del t, gathered
    assert settled() == before, (before, torch.cuda.memory_allocated())

dist.destroy_process_group()
if rank == 0:
    print("OK work_lifetime")

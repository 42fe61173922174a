"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: what DDP programs use beyond the
basics: SyncBatchNorm (CUDA-only statistics kernels), comm hooks over DDP's C++ buckets, sends to
the rank itself and batched sends around the ring, collectives inside inference_mode, deepcopy of GPU
modules."""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)

# SyncBatchNorm under DDP equals BatchNorm on the global batch in one process
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 1))
reference = copy.deepcopy(net)
model = DDP(nn.SyncBatchNorm.convert_sync_batchnorm(net).cuda(), device_ids=[rank])
opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(reference.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
for _ in range(3):
    x = torch.randn(4 * world, 3, 8, 8, generator=g)
    model(x[rank * 4:(rank + 1) * 4].cuda()).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    reference(x).pow(2).mean().backward()
    ref_opt.step()
    ref_opt.zero_grad()
for p, q in zip(model.module.parameters(), reference.parameters()):
    assert p.device == torch.device("cuda", rank) and torch.allclose(p.cpu(), q, atol=1e-5), (p, q)
bn, ref_bn = model.module[1], reference[1]
assert torch.allclose(bn.running_mean.cpu(), ref_bn.running_mean, atol=1e-5)
assert torch.allclose(bn.running_var.cpu(), ref_bn.running_var, atol=1e-5)

# comm hooks see DDP's C++ buckets on the GPU; gradients as bucket views live with their parameters
losses = {}
for variant in ("plain", "powersgd", "fp16", "bucket_view"):
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).cuda()
    ddp = DDP(layers, device_ids=[rank], gradient_as_bucket_view=variant == "bucket_view")
    if variant == "powersgd":
        state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
    elif variant == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    sgd = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(4):
        loss = ddp(torch.ones(4, 16, device="cuda") * (rank + 1)).sum()
        loss.backward()
        assert all(p.grad.device == torch.device("cuda", rank) for p in ddp.parameters())
        sgd.step()
        sgd.zero_grad(set_to_none=False)
    losses[variant] = loss.item()
assert losses["bucket_view"] == losses["plain"], losses
assert abs(losses["fp16"] - losses["plain"]) < 1e-2 * abs(losses["plain"]), losses

# a batch that sends to and receives from the rank itself (NCCL allows it inside a group)
got = torch.zeros(3, device="cuda")
ops = [dist.P2POp(dist.irecv, got, rank), dist.P2POp(dist.isend, torch.full((3,), rank + 1.0, device="cuda"), rank)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
assert got.tolist() == [rank + 1.0] * 3, got
# a batch around the ring: torch 2.4 waits on the batch's one work only, which must finish its recvs
left, right = (rank - 1) % world, (rank + 1) % world
inbox = torch.zeros(2, 4, device="cuda")
ops = [dist.P2POp(dist.isend, torch.full((2, 4), rank + 1.0, device="cuda"), right), dist.P2POp(dist.irecv, inbox, left)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
assert inbox.eq(left + 1.0).all(), inbox

# collectives on inference tensors inside inference_mode (evaluation loops, servers): the strict check's
# issuer starts them, and must do so in the caller's inference mode
with torch.inference_mode():
    gathered = torch.empty(world * 2, 3, device="cuda")
    dist.all_gather_into_tensor(gathered, torch.full((2, 3), float(rank), device="cuda"))
    total = torch.ones(3, device="cuda")
    dist.all_reduce(total, async_op=True).wait()
assert gathered.sum().item() == 6.0 * sum(range(world)) and total.tolist() == [float(world)] * 3, (gathered, total)

# deepcopy keeps modules and tensors on their GPU
assert copy.deepcopy(nn.BatchNorm1d(3).cuda()).running_mean.device == torch.device("cuda", rank)
dist.destroy_process_group()
if rank == 0:
    print("OK ddp_features")

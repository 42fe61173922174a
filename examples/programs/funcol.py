"""A hand-written data-parallel step with functional collectives
(torch.distributed._functional_collectives): the gradients are flattened into one buffer,
reduce_scatter_tensor leaves each rank the averaged gradient of its shard, each rank applies
SGD with momentum to its shard of the flat parameters (ZeRO-1 style), and all_gather_tensor
rebuilds the full parameters; the logged loss is averaged with all_reduce.

    torchrun --nproc-per-node 2 funcol.py
"""
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
import torch.nn.functional as F

GLOBAL_BATCH = 16
STEPS = 5
LR, MOMENTUM = 0.05, 0.9


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    device = torch.device("cuda", local_rank)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1)).to(device)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    padded = -(-numel // world_size) * world_size
    shard_size = padded // world_size
    momentum_buf = torch.zeros(shard_size, device=device)

    g = torch.Generator().manual_seed(77)
    per_rank = GLOBAL_BATCH // world_size
    for step in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 12, generator=g)
        y = (x[:, :3].sum(-1, keepdim=True) > 0).float()
        x = x[rank * per_rank:(rank + 1) * per_rank].to(device)
        y = y[rank * per_rank:(rank + 1) * per_rank].to(device)

        for p in params:
            p.grad = None
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()

        flat_grad = torch.zeros(padded, device=device)
        flat_grad[:numel] = torch.cat([p.grad.reshape(-1) for p in params])
        grad_shard = funcol.reduce_scatter_tensor(flat_grad, "sum", scatter_dim=0, group=group) / world_size

        with torch.no_grad():
            flat_param = torch.zeros(padded, device=device)
            flat_param[:numel] = torch.cat([p.reshape(-1) for p in params])
            param_shard = flat_param[rank * shard_size:(rank + 1) * shard_size]
            momentum_buf.mul_(MOMENTUM).add_(grad_shard)
            param_shard = param_shard - LR * momentum_buf
            full = funcol.all_gather_tensor(param_shard, gather_dim=0, group=group)
            offset = 0
            for p in params:
                p.copy_(full[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

        mean_loss = funcol.all_reduce(loss.detach(), "avg", group=group)
        if rank == 0:
            print(f"step {step} loss {mean_loss.item():.6f}", flush=True)

    total = sum(p.detach().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""The rank side: what every rank of the pool runs for one TrainingCase (fn(ctx, case), importable).

Written as a user would write DDP training, once for every backend: the module on ctx.device
(cpu on sim/gloo, cuda:r on nccl), DDP with device_ids=[that GPU] on GPUs, the rank's shard by
torch.tensor_split, optimizer.zero_grad / backward / step. Everything returned is NumPy on the host.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from conformance.training.case import TrainingCase, loss_factor
from conformance.training.model import build_module

REPLICA_SHIFT = 0.5  # ranks r > 0 of a perturbed case start from state + REPLICA_SHIFT * r


@contextlib.contextmanager
def _full_precision_matmul() -> Iterator[None]:
    """float32 matmuls in full precision (no TF32 on GPUs) for the duration of a case, then as before."""
    import torch

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _host(t: Any) -> np.ndarray | None:
    return None if t is None else t.detach().cpu().numpy().copy()


def _make_optimizer(case: TrainingCase, params: Any) -> Any:
    import torch

    o = case.optimizer
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, nesterov=o.nesterov,
                               weight_decay=o.weight_decay)
    if o.name == "adam":
        return torch.optim.Adam(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
    raise ValueError(f"unknown optimizer {o.name!r}")


def train_ddp(ctx: Any, case: TrainingCase) -> dict:
    """Train case.steps steps under DDP; return step-1 gradients, final parameters and buffers.

    Keys: grads (after step 1's synchronising backward), local_grads (step 1, after the no_sync
    micro-batches, before the last one; None without micro-batches), params, buffers (final).
    """
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    device, rank, world = ctx.device, ctx.rank, case.world_size
    shift = REPLICA_SHIFT * rank if case.perturb else 0.0
    with _full_precision_matmul():
        module = build_module(case.model, case.state, device, shift)
        gpu = {"device_ids": [device], "output_device": device} if device.type == "cuda" else {}
        ddp = DDP(module, **gpu, **case.ddp.kwargs())
        opt = _make_optimizer(case, ddp.parameters())
        names = [n for n, _ in module.named_parameters()]
        branch_on = rank in case.branch_ranks
        xs, ys = torch.from_numpy(case.x).to(device), torch.from_numpy(case.y).to(device)
        result: dict[str, Any] = {"local_grads": None}
        for step in range(case.steps):
            x = torch.tensor_split(xs[step], world)[rank]
            y = torch.tensor_split(ys[step], world)[rank]
            micro = list(zip(torch.tensor_split(x, case.micro_batches), torch.tensor_split(y, case.micro_batches)))
            opt.zero_grad(set_to_none=True)
            for j, (mx, my) in enumerate(micro):
                last = j == len(micro) - 1
                with contextlib.nullcontext() if last else ddp.no_sync():
                    c = loss_factor(case.weighting, mx.shape[0], world, case.batch)
                    (F.mse_loss(ddp(mx, branch_on=branch_on), my) * c).backward()
                if step == 0 and j == len(micro) - 2:
                    result["local_grads"] = {n: _host(p.grad) for n, p in zip(names, module.parameters())}
            if step == 0:
                result["grads"] = {n: _host(p.grad) for n, p in zip(names, module.parameters())}
            opt.step()
        result["params"] = {n: _host(p) for n, p in module.named_parameters()}
        result["buffers"] = {n: _host(b) for n, b in module.named_buffers()}
    return result


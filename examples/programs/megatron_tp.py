"""Megatron-style tensor parallelism written by hand, as Megatron-LM's core layers do it: autograd
Functions for the copy / reduce / gather regions, a vocabulary-parallel embedding (masked lookup, then
all-reduce), column- and row-parallel linear layers over torch.distributed.all_reduce /
all_gather_into_tensor, a vocabulary-parallel cross-entropy (max, sum-exp and target logit all-reduced
across the shards), master weights built on the host and split per rank, a CUDA RNG tracker that
forks the GPU generator per tensor-parallel rank (torch.cuda.get_rng_state / set_rng_state), and
gradient clipping with the norm all-reduced over the tensor-parallel group.

    torchrun --nproc-per-node 2 megatron_tp.py
"""
import contextlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, FFN, SEQ, BATCH = 64, 32, 128, 12, 8
STEPS = 4


class _CopyToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


class _ReduceFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class _GatherFromRegion(torch.autograd.Function):
    """Gathers the last dimension (all_gather_into_tensor on a leading dimension, then a transpose)."""

    @staticmethod
    def forward(ctx, x):
        world = dist.get_world_size()
        x = x.contiguous()
        out = torch.empty((world,) + x.shape, dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x)
        return torch.cat(out.unbind(0), dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(dist.get_world_size(), dim=-1)[dist.get_rank()].contiguous()


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, vocab_start):
        logits_max = logits.max(dim=-1).values
        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)
        logits = logits - logits_max.unsqueeze(-1)
        local_vocab = logits.size(-1)
        mask = (target < vocab_start) | (target >= vocab_start + local_vocab)
        local_target = (target - vocab_start).masked_fill(mask, 0)
        predicted = logits.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(mask, 0.0)
        dist.all_reduce(predicted)
        exp = logits.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp)
        softmax = exp / sum_exp.unsqueeze(-1)
        ctx.save_for_backward(softmax, mask, local_target)
        return sum_exp.log() - predicted

    @staticmethod
    def backward(ctx, grad):
        softmax, mask, local_target = ctx.saved_tensors
        grad_input = softmax.clone()
        hit = (~mask).to(softmax.dtype)
        grad_input.scatter_add_(-1, local_target.unsqueeze(-1), -hit.unsqueeze(-1))
        return grad_input * grad.unsqueeze(-1), None, None


class VocabParallelEmbedding(nn.Module):
    def __init__(self, master):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        per = VOCAB // world
        self.start = rank * per
        self.weight = nn.Parameter(master[self.start:self.start + per].clone())

    def forward(self, tokens):
        mask = (tokens < self.start) | (tokens >= self.start + self.weight.size(0))
        out = F.embedding((tokens - self.start).masked_fill(mask, 0), self.weight)
        return _ReduceFromRegion.apply(out.masked_fill(mask.unsqueeze(-1), 0.0))


class ColumnParallelLinear(nn.Module):
    def __init__(self, master_weight, master_bias, gather_output=False):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        self.weight = nn.Parameter(master_weight.chunk(world, 0)[rank].clone())
        self.bias = nn.Parameter(master_bias.chunk(world, 0)[rank].clone())
        self.gather_output = gather_output

    def forward(self, x):
        out = F.linear(_CopyToRegion.apply(x), self.weight, self.bias)
        return _GatherFromRegion.apply(out) if self.gather_output else out


class RowParallelLinear(nn.Module):
    def __init__(self, master_weight, master_bias):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        self.weight = nn.Parameter(master_weight.chunk(world, 1)[rank].clone())
        self.bias = nn.Parameter(master_bias.clone())   # replicated: added once, after the reduction

    def forward(self, x):
        return _ReduceFromRegion.apply(F.linear(x, self.weight)) + self.bias


class Reference(nn.Module):
    """The unsplit model: its parameters are the master weights every rank splits."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, FFN)
        self.fc2 = nn.Linear(FFN, DIM)
        self.out_norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + self.fc2(F.gelu(self.fc1(self.norm(h))))
        return self.head(self.out_norm(h))


class ParallelModel(nn.Module):
    def __init__(self, ref):
        super().__init__()
        self.embed = VocabParallelEmbedding(ref.embed.weight.detach())
        self.norm = nn.LayerNorm(DIM)
        self.norm.load_state_dict(ref.norm.state_dict())
        self.fc1 = ColumnParallelLinear(ref.fc1.weight.detach(), ref.fc1.bias.detach())
        self.fc2 = RowParallelLinear(ref.fc2.weight.detach(), ref.fc2.bias.detach())
        self.out_norm = nn.LayerNorm(DIM)
        self.out_norm.load_state_dict(ref.out_norm.state_dict())
        self.head = ColumnParallelLinear(ref.head.weight.detach(), ref.head.bias.detach())   # vocab-parallel logits

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h + self.fc2(F.gelu(self.fc1(self.norm(h))))
        return self.head(self.out_norm(h))


class CudaRNGTracker:
    """Megatron's model-parallel RNG: a named GPU generator state, seeded per tensor-parallel rank."""

    def __init__(self):
        self.states = {}

    def add(self, name, seed):
        saved = torch.cuda.get_rng_state()
        torch.cuda.manual_seed(seed)
        self.states[name] = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(saved)

    @contextlib.contextmanager
    def fork(self, name="model-parallel-rng"):
        saved = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(self.states[name])
        try:
            yield
        finally:
            self.states[name] = torch.cuda.get_rng_state()
            torch.cuda.set_rng_state(saved)


def batches(g):
    for _ in range(STEPS):
        yield torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    assert VOCAB % dist.get_world_size() == 0 and FFN % dist.get_world_size() == 0

    torch.manual_seed(0)
    model = ParallelModel(Reference()).cuda()
    tracker = CudaRNGTracker()
    tracker.add("model-parallel-rng", 2718 + rank)
    default_state = torch.cuda.get_rng_state()
    with tracker.fork():   # a per-rank random draw (Megatron: dropout inside the parallel region)
        noise = torch.rand(4, device="cuda")
    assert torch.equal(torch.cuda.get_rng_state(), default_state), "the tracker must restore the default state"
    gathered = [torch.empty_like(noise) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, noise)
    assert all(not torch.equal(gathered[0], other) for other in gathered[1:]), "tensor-parallel ranks drew alike"

    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    split = {id(p) for m in (model.embed, model.fc1, model.head) for p in m.parameters()} | {id(model.fc2.weight)}
    for step, tokens in enumerate(batches(torch.Generator().manual_seed(19))):
        tokens = tokens.cuda()
        logits = model(tokens[:, :-1])
        loss = _VocabParallelCrossEntropy.apply(logits, tokens[:, 1:], model.head.weight.size(0) * rank).mean()
        loss.backward()
        # the global norm: split parameters' squares summed over ranks, replicated ones counted once
        split_sq = sum(p.grad.pow(2).sum() for p in model.parameters() if id(p) in split)
        dist.all_reduce(split_sq)
        total_sq = split_sq + sum(p.grad.pow(2).sum() for p in model.parameters() if id(p) not in split)
        coef = torch.clamp(1.0 / (total_sq.sqrt() + 1e-6), max=1.0)
        for p in model.parameters():
            p.grad.mul_(coef)
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)

    split_sum = sum(p.detach().sum() for p in model.parameters() if id(p) in split)
    dist.all_reduce(split_sum)
    final = split_sum + sum(p.detach().sum() for p in model.parameters() if id(p) not in split)
    if rank == 0:
        print(f"final {final.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

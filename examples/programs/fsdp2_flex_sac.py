"""Llama-style pretraining with FSDP2, as large-model trainers write it: the model built on the meta
device, sharded per block, materialised with to_empty and loaded from a full checkpoint broadcast
from rank 0 (set_model_state_dict with broadcast_from_rank0), FlexAttention with a document mask
built by create_block_mask (packed sequences: causal within each document), selective activation
checkpointing that saves matmuls (create_selective_checkpoint_contexts), each block compiled with
torch.compile, gradient accumulation with set_requires_gradient_sync, gradient clipping over
DTensors and a cosine schedule.

    torchrun --nproc-per-node 2 fsdp2_flex_sac.py [--offload]

--offload keeps parameters, gradients and optimizer state on the host (CPUOffloadPolicy).
"""
import functools
import math
import os
import re
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

VOCAB, DIM, HEADS, SEQ, LAYERS = 64, 32, 4, 32, 2
GLOBAL_BATCH = 8          # sequences per optimizer step
ACCUMULATION = 2
STEPS = 4
DOC_LEN = 8               # documents packed back to back in each sequence (lengths 8 - 3 + 3 ...)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wqkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x, block_mask):
        b, s, _ = x.shape
        q, k, v = self.wqkv(x).view(b, s, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        out = attention(q, k, v, block_mask)
        return self.wo(out.transpose(1, 2).reshape(b, s, DIM))


def attention(q, k, v, block_mask):
    return flex_attention(q, k, v, block_mask=block_mask)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.w1 = nn.Linear(DIM, 2 * DIM, bias=False)
        self.w2 = nn.Linear(2 * DIM, DIM, bias=False)

    def forward(self, x, block_mask):
        x = x + self.attention(self.attention_norm(x), block_mask)
        return x + self.w2(F.silu(self.w1(self.ffn_norm(x))))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens, block_mask):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, block_mask)
        return self.output(self.norm(h))


def document_ids(seq_len):
    """Documents of lengths 8, 5, 11, 8 packed into one sequence."""
    lengths = [8, 5, 11, 8]
    return torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[:seq_len]


def make_block_mask(device):
    docs = document_ids(SEQ).to(device)

    def document_causal(b, h, q_idx, kv_idx):
        return (docs[q_idx] == docs[kv_idx]) & (q_idx >= kv_idx)

    return create_block_mask(document_causal, B=None, H=None, Q_LEN=SEQ, KV_LEN=SEQ, device=device)


_SAVE = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.addmm.default}


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE


class CheckpointedBlock(nn.Module):
    """Selective activation checkpointing around a block, as torchtitan's "selective op" mode."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x, block_mask):
        return checkpoint(self.block, x, block_mask, use_reentrant=False,
                          context_fn=functools.partial(create_selective_checkpoint_contexts, _policy))


def batches(g):
    for _ in range(STEPS):
        yield torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ + 1), generator=g)


def lr_lambda(step):
    warmup = 1
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / STEPS))


def main():
    offload = "--offload" in sys.argv
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    # the "checkpoint" every rank would read: rank 0 holds the full weights
    torch.manual_seed(0)
    full_state = Transformer().state_dict() if rank == 0 else {}

    with torch.device("meta"):
        model = Transformer()
    for i, layer in enumerate(model.layers):
        model.layers[i] = CheckpointedBlock(torch.compile(layer))
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    extra = {"offload_policy": CPUOffloadPolicy()} if offload else {}
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp_policy, **extra)
    fully_shard(model, mp_policy=mp_policy, reshard_after_forward=False, **extra)
    model.to_empty(device="cpu" if offload else device)
    set_model_state_dict(
        model,
        {re.sub(r"^layers\.(\d+)\.", r"layers.\1.block.", k): v for k, v in full_state.items()},
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
    )

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    block_mask = make_block_mask(device)

    per_rank = GLOBAL_BATCH // world_size
    micro = per_rank // ACCUMULATION
    for step, tokens in enumerate(batches(torch.Generator().manual_seed(5))):
        mine = tokens[rank * per_rank:(rank + 1) * per_rank].to(device)
        total = torch.zeros((), device=device)
        for m in range(ACCUMULATION):
            model.set_requires_gradient_sync(m == ACCUMULATION - 1)
            chunk = mine[m * micro:(m + 1) * micro]
            logits = model(chunk[:, :-1], block_mask)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), chunk[:, 1:].reshape(-1)) / ACCUMULATION
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {total.item():.6f}", flush=True)

    final = sum(p.full_tensor().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {final.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Megatron-style tensor parallelism written with DTensor, as llama-style trainers write it: the
embedding split by rows, attention heads and MLP columns split over the GPUs (ColwiseParallel /
RowwiseParallel), norms and residuals on sequence shards (SequenceParallel, PrepareModuleInput), the
output projection left sharded over the vocabulary and the cross-entropy computed on those shards
under loss_parallel(); weights initialised on one rank's host and scattered with distribute_tensor,
checked by redistribute / full_tensor round trips; AdamW with fused=False, foreach over DTensors.

    torchrun --nproc-per-node 2 tp_loss_parallel.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, loss_parallel, parallelize_module)

VOCAB, DIM, HEADS, SEQ, LAYERS, BATCH = 64, 32, 4, 16, 2, 4
STEPS = 4


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: each rank holds HEADS / tp of them after ColwiseParallel
        q, k, v = (w(x).view(b, s, -1, DIM // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, 3 * DIM, bias=False)
        self.w3 = nn.Linear(DIM, 3 * DIM, bias=False)
        self.w2 = nn.Linear(3 * DIM, DIM, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def apply_tp(model, mesh):
    parallelize_module(model, mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    for block in model.layers:
        parallelize_module(block, mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        })


def load_weights(model, full_state, mesh):
    """Scatter rank 0's host weights (a checkpoint) into the sharded parameters with distribute_tensor."""
    for name, param in model.named_parameters():
        full = full_state[name].to(param.device_mesh.device_type) if dist.get_rank() == 0 else \
            torch.empty(param.shape, device=param.device_mesh.device_type)
        shard = distribute_tensor(full, mesh, param.placements, src_data_rank=0)
        param.data.copy_(shard)
        # a round trip: all-gather to every rank and back to the parameter's layout
        replicated = param.redistribute(mesh, [Replicate()])
        assert replicated.placements == (Replicate(),)
        assert torch.equal(replicated.redistribute(mesh, param.placements).to_local(), param.to_local())
        gathered = param.full_tensor()   # a collective: every rank
        if dist.get_rank() == 0:
            assert torch.equal(gathered.cpu(), full_state[name]), name


def batches(g):
    for _ in range(STEPS):
        yield torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),), mesh_dim_names=("tp",))
    rank = dist.get_rank()

    torch.manual_seed(0)
    full_state = {k: v.clone() for k, v in Transformer().state_dict().items()}
    model = Transformer().cuda()
    apply_tp(model, mesh)
    load_weights(model, full_state, mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=True)

    for step, tokens in enumerate(batches(torch.Generator().manual_seed(8))):
        tokens = tokens.cuda()
        logits = model(tokens[:, :-1])
        assert isinstance(logits, DTensor) and logits.placements == (Shard(2),), logits.placements
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(0, 1))
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0:
            print(f"step {step} loss {loss.full_tensor().item() if isinstance(loss, DTensor) else loss.item():.6f}",
                  flush=True)

    final = sum(p.full_tensor().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {final.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

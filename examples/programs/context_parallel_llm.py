"""Long-sequence training with context parallelism, as llama-style pretraining runs it: the sequence of
every batch split over the GPUs by torch.distributed.tensor.experimental.context_parallel (inputs,
targets and position ids sharded along the sequence, causal attention load-balanced over the ranks),
the parameters sharded with FSDP2 over the same mesh, attention through scaled_dot_product_attention
restricted by the sdpa_kernel context manager, the loss averaged over the ranks' sequence shards.

    torchrun --nproc-per-node 2 context_parallel_llm.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.experimental import context_parallel
from torch.nn.attention import SDPBackend, sdpa_kernel

# float32 attention runs the memory-efficient kernel, whose logsumexp comes in blocks of 32 rows: the ring's
# half-shards (load balancing) must be multiples of 32 rows, on CUDA too, so 256 tokens serve up to 4 GPUs
VOCAB, DIM, HEADS, SEQ, LAYERS, BATCH = 96, 32, 4, 256, 2, 2
STEPS = 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(approximate="tanh"), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, DIM))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens, positions):
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def batches(g):
    for _ in range(STEPS):
        yield torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    world_size = int(os.environ["WORLD_SIZE"])
    mesh = init_device_mesh("cuda", (world_size,), mesh_dim_names=("cp",))
    rank = mesh.get_local_rank("cp")
    device = torch.device("cuda", local_rank)

    torch.manual_seed(0)
    model = GPT().to(device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)

    for step, tokens in enumerate(batches(torch.Generator().manual_seed(23))):
        tokens = tokens.to(device)
        inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        positions = torch.arange(SEQ, device=device).expand(BATCH, SEQ).contiguous()
        with context_parallel(mesh, buffers=[inputs, targets, positions], buffer_seq_dims=[1, 1, 1],
                              no_restore_buffers={inputs, targets, positions}):
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
                logits = model(inputs, positions)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        logged = loss.detach()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG, group=mesh.get_group())
        if rank == 0:
            print(f"step {step} loss {logged.item():.6f}", flush=True)

    final = sum(p.full_tensor().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {final.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

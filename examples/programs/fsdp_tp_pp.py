"""3-D parallelism, as in torchtitan: a small transformer on a (pp, dp, tp) DeviceMesh, pipeline
parallel across "pp" (one stage per pipeline rank, GPipe over 4 microbatches), tensor parallel
inside each block on "tp" (attention heads and the feed-forward split), FSDP2 (fully_shard) on
"dp". Run on pp x dp x tp GPUs: 8 as 2 x 2 x 2, 64 as 4 x 4 x 4 (the default is the cube root of
the world size; --mesh PP DP TP chooses another layout).

    torchrun --nproc-per-node 8 fsdp_tp_pp.py
    simgpu run --gpus 64 torchrun --nproc-per-node 64 fsdp_tp_pp.py
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

VOCAB = 64
DIM = 32
HEADS = 4
LAYERS = 4
SEQ = 8
GLOBAL_BATCH = 32
N_MICROBATCHES = 4
STEPS = 5


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        head_dim = DIM // HEADS  # -1 below: the heads of this tensor-parallel rank
        q, k, v = (w(x).view(b, s, -1, head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, 2 * DIM, bias=False)
        self.w3 = nn.Linear(DIM, 2 * DIM, bias=False)
        self.w2 = nn.Linear(2 * DIM, DIM, bias=False)

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
        self.layers = nn.ModuleDict({str(i): Block() for i in range(LAYERS)})
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, h):
        h = self.tok_embeddings(h) if self.tok_embeddings is not None else h
        for layer in self.layers.values():
            h = layer(h)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def batches(g: torch.Generator):
    """Step by step: GLOBAL_BATCH sequences counting up from a random token, and their next tokens
    (the same on every rank): something to learn."""
    for _ in range(STEPS):
        start = torch.randint(0, VOCAB, (GLOBAL_BATCH, 1), generator=g)
        tokens = (start + torch.arange(SEQ + 1)) % VOCAB
        yield tokens[:, :-1], tokens[:, 1:]


def layout(world_size: int, asked: list[int] | None) -> tuple[int, int, int]:
    if asked:
        pp, dp, tp = asked
    else:
        side = round(world_size ** (1 / 3))
        pp = dp = tp = side
    assert pp * dp * tp == world_size, f"--mesh {pp} {dp} {tp} needs {pp * dp * tp} GPUs, not {world_size}"
    assert LAYERS % pp == 0 and HEADS % tp == 0 and GLOBAL_BATCH % (dp * N_MICROBATCHES) == 0
    return pp, dp, tp


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mesh", type=int, nargs=3, metavar=("PP", "DP", "TP"))
    args = parser.parse_args()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    device = torch.device("cuda", torch.cuda.current_device())
    pp, dp, tp = layout(int(os.environ["WORLD_SIZE"]), args.mesh)
    mesh = init_device_mesh("cuda", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    pp_rank, dp_rank, tp_rank = (mesh[name].get_local_rank() for name in ("pp", "dp", "tp"))

    torch.manual_seed(0)
    model = Transformer()
    per_stage = LAYERS // pp  # this stage keeps its layers, the first the embedding, the last the head
    for i in range(LAYERS):
        if not pp_rank * per_stage <= i < (pp_rank + 1) * per_stage:
            del model.layers[str(i)]
    if pp_rank != 0:
        model.tok_embeddings = None
    if pp_rank != pp - 1:
        model.norm, model.output = None, None
    model.to(device)
    for block in model.layers.values():
        parallelize_module(block, mesh["tp"], {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
        })
        fully_shard(block, mesh=mesh["dp"], reshard_after_forward=False)
    fully_shard(model, mesh=mesh["dp"], reshard_after_forward=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)

    stage = PipelineStage(model, pp_rank, pp, device, group=mesh["pp"].get_group())
    schedule = ScheduleGPipe(stage, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
    per_dp = GLOBAL_BATCH // dp
    for step, (tokens, targets) in enumerate(batches(torch.Generator().manual_seed(11))):
        mine = slice(dp_rank * per_dp, (dp_rank + 1) * per_dp)
        optimizer.zero_grad()
        if pp_rank == 0:
            schedule.step(tokens[mine].to(device))
        elif pp_rank == pp - 1:
            losses = []
            schedule.step(target=targets[mine].to(device), losses=losses)
            loss = torch.stack(losses).mean()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=mesh["dp"].get_group())
            if dp_rank == 0 and tp_rank == 0:
                print(f"step {step} loss {loss.item():.6f}", flush=True)
        else:
            schedule.step()
        optimizer.step()

    total = sum(p.full_tensor().sum() for p in model.parameters())
    dist.all_reduce(total, group=mesh["pp"].get_group())  # each stage holds its part of the model
    if dist.get_rank() == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

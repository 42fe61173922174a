"""A Llama-style transformer trained with 3-D parallelism as torchtitan lays it out: pipeline stages on
"pp" (1F1B), tensor parallel inside each block on "tp" (attention heads and the SwiGLU split), FSDP2 on
"dp" with bf16 parameters and fp32 gradient reduction. The program a plan of a large world runs
(docs/plan-mode.md, benchmarks/results/plan33-scale-*): each stage builds only its own layers, on the GPU
(`with torch.device(...)`), so nothing of the full model is ever made on the host.

    torchrun --nproc-per-node 8 llama_3d.py --mesh 2 2 2 --size tiny
    simgpu run --plan h100-80g --gpus 256 --ranks 0,32,...  torchrun --nproc-per-node 256 llama_3d.py --mesh 4 8 8

Sizes: `8b` is Llama 3 8B's shape (4096 wide, 32 layers, 32 heads, SwiGLU 14336, vocabulary 128256, the
heads not grouped), `tiny` a few MB for tests. Each rank prints one JSON line: its coordinates and the
allocator's peaks and the median step time after `--warmup` steps
(host time between synchronizes; under a plan, the plan's clock).
"""
import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import thread_cpu  # noqa: E402
from step_reference import host_probe_us  # noqa: E402


@dataclass(frozen=True)
class Size:
    dim: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    seq: int


GPUS_PER_NODE = 8
SIZES = {"8b": Size(dim=4096, layers=32, heads=32, ffn=14336, vocab=128256, seq=8192),
         "small": Size(dim=1024, layers=8, heads=16, ffn=4096, vocab=32000, seq=2048),
         "tiny": Size(dim=64, layers=4, heads=4, ffn=128, vocab=256, seq=32)}


class Attention(nn.Module):
    def __init__(self, s: Size):
        super().__init__()
        self.head_dim = s.dim // s.heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(s.dim, s.dim, bias=False) for _ in range(4))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, s: Size):
        super().__init__()
        self.w1 = nn.Linear(s.dim, s.ffn, bias=False)
        self.w3 = nn.Linear(s.dim, s.ffn, bias=False)
        self.w2 = nn.Linear(s.ffn, s.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, s: Size):
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(s.dim), nn.RMSNorm(s.dim)
        self.attention, self.feed_forward = Attention(s), FeedForward(s)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Stage(nn.Module):
    """The layers of one pipeline stage; the first has the embedding, the last the norm and the head."""

    def __init__(self, s: Size, first: bool, last: bool, layers: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(s.vocab, s.dim) if first else None
        self.layers = nn.ModuleList(Block(s) for _ in range(layers))
        self.norm = nn.RMSNorm(s.dim) if last else None
        self.output = nn.Linear(s.dim, s.vocab, bias=False) if last else None

    def forward(self, h):
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(h)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)) if self.output is not None else h


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mesh", type=int, nargs=3, metavar=("PP", "DP", "TP"), required=True)
    parser.add_argument("--size", choices=sorted(SIZES), default="8b")
    parser.add_argument("--microbatches", type=int, default=8, help="per pipeline and step")
    parser.add_argument("--microbatch-size", type=int, default=1, help="sequences per microbatch and dp rank")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="steps left out of step_ms")
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="profile the last step (torch.profiler, CPU and CUDA): DIR/rank<r>.json (Chrome trace) "
                             "and, in the rank's JSON line, the step's GPU busy time and its kernels' count")
    parser.add_argument("--snapshot", default=None, metavar="DIR",
                        help="record the caching allocator's history from the start and dump it at the end as "
                             "DIR/rank<r>.pickle (torch.cuda.memory._dump_snapshot; where a plan's peak differs)")
    args = parser.parse_args()
    s = SIZES[args.size]
    pp, dp, tp = args.mesh
    world = int(os.environ["WORLD_SIZE"])
    if pp * dp * tp != world or s.layers % pp or s.heads % tp or s.ffn % tp:
        raise SystemExit(f"llama_3d.py: --mesh {pp} {dp} {tp} does not fit {world} GPUs and size {args.size}")
    # torch's device index is 8 bits (a process addresses at most 128 GPUs): a plan of more GPUs than
    # that on one simulated host puts each rank on GPU LOCAL_RANK % 8, as a cluster of 8-GPU nodes does
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % GPUS_PER_NODE)
    device = torch.device("cuda", torch.cuda.current_device())
    if args.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=1000000, stacks="python")
    mesh = init_device_mesh("cuda", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    pp_rank, dp_rank, tp_rank = (mesh[name].get_local_rank() for name in ("pp", "dp", "tp"))

    with torch.device(device):
        model = Stage(s, pp_rank == 0, pp_rank == pp - 1, s.layers // pp)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, block in enumerate(model.layers):
        parallelize_module(block, mesh["tp"], {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
        })
        fully_shard(block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=i < len(model.layers) - 1)
    fully_shard(model, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)

    stage = PipelineStage(model, pp_rank, pp, device, group=mesh["pp"].get_group())
    schedule = Schedule1F1B(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    batch = args.microbatches * args.microbatch_size
    g = torch.Generator().manual_seed(0)  # the same tokens on every rank (a plan's branches agree)
    times, issue_times, issue_cpu, probes, threads = [], [], [], [], []
    profiled = None
    for step in range(args.steps):
        if args.profile and step == args.steps - 1:
            profiled = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                          torch.profiler.ProfilerActivity.CUDA])
            profiled.__enter__()
        torch.cuda.synchronize(device)
        started, started_cpu, started_threads = time.perf_counter(), time.thread_time(), thread_cpu.snapshot()
        tokens = torch.randint(0, s.vocab, (batch, s.seq + 1), generator=g)
        optimizer.zero_grad()
        if pp == 1:  # one stage: it takes the inputs and computes the loss
            schedule.step(tokens[:, :-1].to(device), target=tokens[:, 1:].to(device))
        elif pp_rank == 0:
            schedule.step(tokens[:, :-1].to(device))
        elif pp_rank == pp - 1:
            schedule.step(target=tokens[:, 1:].to(device))
        else:
            schedule.step()
        optimizer.step()
        issued, issued_cpu = time.perf_counter(), time.thread_time()  # the host has issued the step's work
        torch.cuda.synchronize(device)
        if step >= args.warmup:
            times.append((time.perf_counter() - started) * 1e3)
            threads.append(thread_cpu.since(started_threads))
            issue_times.append((issued - started) * 1e3)
            issue_cpu.append((issued_cpu - started_cpu) * 1e3)
            probes.append(host_probe_us())
    if args.snapshot:
        os.makedirs(args.snapshot, exist_ok=True)
        torch.cuda.memory._dump_snapshot(os.path.join(args.snapshot, f"rank{dist.get_rank()}.pickle"))
    busy = None
    if profiled is not None:
        profiled.__exit__(None, None, None)
        os.makedirs(args.profile, exist_ok=True)
        profiled.export_chrome_trace(os.path.join(args.profile, f"rank{dist.get_rank()}.json"))
        busy = _gpu_busy_ms(profiled)
    line = {"rank": dist.get_rank(), "pp": pp_rank, "dp": dp_rank, "tp": tp_rank,
            "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
            "step_ms": statistics.median(times) if times else None, "step_ms_all": times,
            "issue_ms": statistics.median(issue_times) if issue_times else None,
            "issue_cpu_ms": statistics.median(issue_cpu) if issue_cpu else None,
            "probe_us": statistics.median(probes) if probes and None not in probes else None,
            "thread_cpu_ms": thread_cpu.medians(threads),
            **({"profiled_step_ms": times[-1] if times else None, "gpu_busy_ms": busy[0], "kernels": busy[1]}
               if busy is not None else {})}
    os.write(1, (json.dumps(line) + "\n").encode())
    dist.destroy_process_group()


def _gpu_busy_ms(profiled: torch.profiler.profile) -> tuple[float, int]:
    """The union of the profiled step's GPU kernel intervals (ms) and their count: busy against the step's
    wall time says whether the GPU or the host (or a wait between stages) bounds the step."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in profiled.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    busy, end = 0, None
    for start, stop in spans:
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy / 1e3, len(spans)


if __name__ == "__main__":
    main()

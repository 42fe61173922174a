"""Reference training steps for `simgpu run --plan` (issue 33): a small GPT-style transformer trained a
few steps under several parallel layouts; per rank, the median step time and the caching allocator's
peaks, so a plan's predictions can be checked against real GPUs.

    torchrun --nproc-per-node 4 benchmarks/plan_reference/step_reference.py --size small medium --out steps.jsonl
    simgpu run --gpus 2 torchrun --nproc-per-node 2 benchmarks/plan_reference/step_reference.py --size tiny --out x

Plain torch (no simgpu import). One process group; the layouts run one after another in the same
processes (`--layouts` picks; default: every layout the world size allows), each from a clean
allocator: the previous model, optimizer and their tensors freed, `empty_cache()`, peaks reset. What
stays from one layout to the next is what a fresh process would also have after its first step
(cuBLAS workspaces, NCCL communicators), and the plan mode runs this same program in the same
order, so each layout's figures compare like for like. Rank 0 appends one JSON line per layout to
`--out`: the config, the layout, and every rank's step times (wall, around a barrier and a
synchronize, after `--warmup` steps), `max_memory_allocated`, `max_memory_reserved`, allocation
retries, and the device memory in use outside the allocator (`mem_get_info`: CUDA context and NCCL's
buffers), the figure the plan mode states as a constant until measured.

Layouts (dp = data parallel, tp = tensor parallel, pp = pipeline stages):
  ddp         DDP over all ranks, autocast bf16
  fsdp2       fully_shard per block and root, autocast bf16 (fp32 parameters gathered)
  fsdp2_mp    fully_shard with MixedPrecisionPolicy(param bf16, reduce fp32), no autocast
  tp          tensor parallel over all ranks (heads, feed-forward, vocabulary), autocast bf16
  fsdp2_tp    2-D: tp=2 inside, fully_shard over dp=world/2 (4 GPUs and up), autocast bf16
  pp          2 pipeline stages (1F1B, 4 microbatches or one per sequence), dp=world/2 by fully_shard when world > 2
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import thread_cpu  # noqa: E402 - this folder's (the script's own directory is on sys.path)


@dataclass(frozen=True)
class Config:
    vocab: int
    dim: int
    heads: int
    layers: int
    seq: int
    batch: int  # sequences per data-parallel rank and step

    @property
    def params(self) -> int:
        return 2 * self.vocab * self.dim + self.layers * (12 * self.dim * self.dim + 2 * self.dim) + self.dim


SIZES = {
    "tiny": Config(vocab=256, dim=64, heads=4, layers=4, seq=32, batch=8),
    "wide": Config(vocab=32768, dim=1024, heads=16, layers=2, seq=16, batch=4),  # 93 M params, few tokens:
    # runs with data on CPU processes, to compare a plan with the simulation with data at a real width
    "small": Config(vocab=32768, dim=1024, heads=16, layers=4, seq=1024, batch=8),
    "medium": Config(vocab=32768, dim=2048, heads=16, layers=8, seq=2048, batch=4),
    "large": Config(vocab=32768, dim=4096, heads=32, layers=8, seq=4096, batch=2),  # DDP: ~50 GB a GPU
}
LAYOUTS = ("ddp", "fsdp2", "fsdp2_mp", "tp", "fsdp2_tp", "pp")
MICROBATCHES = 4


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.head_dim = c.dim // c.heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(c.dim, c.dim, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape  # -1 heads below: this tensor-parallel rank's share of them
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.w1 = nn.Linear(c.dim, 4 * c.dim, bias=False)
        self.w2 = nn.Linear(4 * c.dim, c.dim, bias=False)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attention_norm = nn.LayerNorm(c.dim, bias=False)
        self.attention = Attention(c)
        self.ffn_norm = nn.LayerNorm(c.dim, bias=False)
        self.feed_forward = FeedForward(c)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class GPT(nn.Module):
    """Embedding, blocks, final norm and head; a pipeline stage keeps its share (the others None)."""

    def __init__(self, c: Config):
        super().__init__()
        self.tok_embeddings = nn.Embedding(c.vocab, c.dim)
        self.layers = nn.ModuleDict({str(i): Block(c) for i in range(c.layers)})
        self.norm = nn.LayerNorm(c.dim, bias=False)
        self.output = nn.Linear(c.dim, c.vocab, bias=False)

    def forward(self, h):
        h = self.tok_embeddings(h) if self.tok_embeddings is not None else h
        for layer in self.layers.values():
            h = layer(h)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def loss_fn(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def mesh_shape(layout: str, world: int) -> tuple[int, int, int]:
    """(pp, dp, tp) of a layout at this world size."""
    return {"ddp": (1, world, 1), "fsdp2": (1, world, 1), "fsdp2_mp": (1, world, 1), "tp": (1, 1, world),
            "fsdp2_tp": (1, world // 2, 2), "pp": (2, world // 2, 1)}[layout]


def allowed(layout: str, world: int, c: Config) -> bool:
    pp, dp, tp = mesh_shape(layout, world)
    if pp * dp * tp != world or c.heads % tp or c.layers % pp:
        return False
    return not (layout == "fsdp2_tp" and dp < 2)


class Run:
    """One layout's model, optimizer and step function on this rank."""

    def __init__(self, layout: str, c: Config, device: torch.device):
        from torch.distributed.device_mesh import init_device_mesh

        self.layout, self.c, self.device = layout, c, device
        world = dist.get_world_size()
        self.pp, self.dp, self.tp = mesh_shape(layout, world)
        self.mesh = init_device_mesh(device.type, (self.pp, self.dp, self.tp), mesh_dim_names=("pp", "dp", "tp"))
        self.pp_rank, self.dp_rank = self.mesh["pp"].get_local_rank(), self.mesh["dp"].get_local_rank()
        self.autocast = layout != "fsdp2_mp"
        torch.manual_seed(0)
        with torch.device("meta"):
            model = GPT(c)
        if self.pp > 1:
            self._keep_stage(model)
        model.to_empty(device=device)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0)
        self.model = self._wrap(model)
        self.optimizer = self._optimizer()
        self.schedule = self._schedule() if self.pp > 1 else None
        g = torch.Generator(device="cpu").manual_seed(1 + self.dp_rank)
        tokens = torch.randint(0, c.vocab, (c.batch, c.seq + 1), generator=g)
        self.inputs, self.targets = tokens[:, :-1].to(device), tokens[:, 1:].to(device)

    def _keep_stage(self, model: GPT) -> None:
        per_stage = self.c.layers // self.pp
        for i in range(self.c.layers):
            if not self.pp_rank * per_stage <= i < (self.pp_rank + 1) * per_stage:
                del model.layers[str(i)]
        if self.pp_rank != 0:
            model.tok_embeddings = None
        if self.pp_rank != self.pp - 1:
            model.norm, model.output = None, None

    def _wrap(self, model: GPT) -> nn.Module:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        if self.layout == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            return DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if self.tp > 1:
            parallelize_module(model, self.mesh["tp"], {
                "tok_embeddings": RowwiseParallel(input_layouts=Replicate()),
                "output": ColwiseParallel(output_layouts=Replicate())})
            for block in model.layers.values():
                parallelize_module(block, self.mesh["tp"], {
                    "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                    "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
                    "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()})
        if self.dp > 1:
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
                if self.layout == "fsdp2_mp" else MixedPrecisionPolicy()
            for block in model.layers.values():
                fully_shard(block, mesh=self.mesh["dp"], mp_policy=mp)
            fully_shard(model, mesh=self.mesh["dp"], mp_policy=mp)
        return model

    def _optimizer(self) -> torch.optim.Optimizer:
        from torch.distributed.tensor import DTensor

        params = list(self.model.parameters())
        groups = [g for g in ([p for p in params if isinstance(p, DTensor)],
                              [p for p in params if not isinstance(p, DTensor)]) if g]
        # plain tensors and DTensors in separate groups: foreach AdamW takes one kind per call
        return torch.optim.AdamW([{"params": g} for g in groups], lr=1e-4, foreach=True)

    def _schedule(self):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        stage = PipelineStage(self.model, self.pp_rank, self.pp, self.device, group=self.mesh["pp"].get_group())
        return Schedule1F1B(stage, n_microbatches=min(MICROBATCHES, self.c.batch), loss_fn=loss_fn)

    def step(self) -> None:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            if self.schedule is None:
                loss_fn(self.model(self.inputs), self.targets).backward()
            elif self.pp_rank == 0:
                self.schedule.step(self.inputs)
            else:
                self.schedule.step(target=self.targets, losses=[])
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_used(device: torch.device) -> int | None:
    """Bytes in use on the whole GPU (every process's, context and NCCL included), None off CUDA."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def host_probe_us() -> float | None:
    """This process's host speed now (simgpu's plan_host speed probe: a fixed piece of plain Python, least of
    3), taken between real steps so that a plan can be run for the host these steps had
    (SIMGPU_PLAN_HOST_PROBE_US): the same box's processes differ up to 2x. None without simgpu or under a
    plan (its probe's CPU would count as the next step's program work)."""
    try:
        from simgpu.cuda_sim import plan_host
    except ImportError:
        return None
    return None if plan_host.measuring() else plan_host.speed_probe_us(repeats=3)


def measure(layout: str, c: Config, device: torch.device, warmup: int, steps: int,
            snapshot: str | None = None) -> dict:
    """Build, train and time one layout from a clean allocator; this rank's figures. With `snapshot` (a
    file), the caching allocator's history of the layout is dumped there (torch.cuda.memory._dump_snapshot)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    before = {"allocated": torch.cuda.memory_allocated(device), "reserved": torch.cuda.memory_reserved(device),
              "device_used": device_used(device)} if device.type == "cuda" else {}
    started = time.perf_counter()
    if snapshot and device.type == "cuda":
        torch.cuda.memory._record_memory_history(max_entries=500000)
    run = Run(layout, c, device)
    times, issue_times, issue_cpu, probes, threads = [], [], [], [], []
    for i in range(warmup + steps):
        dist.barrier()
        synchronize(device)
        t0, t0_cpu, t0_threads = time.perf_counter(), time.thread_time(), thread_cpu.snapshot()
        run.step()
        issued, issued_cpu = time.perf_counter(), time.thread_time()  # the host has issued the step's work
        synchronize(device)
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
            threads.append(thread_cpu.since(t0_threads))
            issue_times.append((issued - t0) * 1e3)
            issue_cpu.append((issued_cpu - t0_cpu) * 1e3)
            probes.append(host_probe_us())
    out = {"rank": dist.get_rank(), "pp_rank": run.pp_rank, "dp_rank": run.dp_rank,
           "step_ms": statistics.median(times), "step_ms_all": times,
           "issue_ms": statistics.median(issue_times), "issue_cpu_ms": statistics.median(issue_cpu),
           "probe_us": statistics.median(probes) if None not in probes else None,
           "thread_cpu_ms": thread_cpu.medians(threads),
           "seconds": time.perf_counter() - started,
           "before": before}
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        out.update(max_allocated=torch.cuda.max_memory_allocated(device),
                   max_reserved=torch.cuda.max_memory_reserved(device),
                   allocated=torch.cuda.memory_allocated(device), reserved=torch.cuda.memory_reserved(device),
                   alloc_retries=stats.get("num_alloc_retries", 0), ooms=stats.get("num_ooms", 0),
                   device_used=device_used(device))
    if snapshot and device.type == "cuda":
        torch.cuda.memory._dump_snapshot(snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    del run  # its process groups stay (a mesh dimension over the whole world is the default group)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", nargs="+", choices=sorted(SIZES), default=["small"])
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", default=None, help="default: nccl on cuda, gloo on cpu")
    parser.add_argument("--timeout", type=float, default=180,
                        help="process-group timeout, seconds: a rank left waiting (another one's OOM) ends")
    parser.add_argument("--out", required=True, help="rank 0 appends one JSON line per layout")
    parser.add_argument("--snapshot", default=None, metavar="DIR",
                        help="dump each rank's allocator history per layout to DIR/<size>-<layout>-rank<r>.pickle "
                             "(torch.cuda.memory._dump_snapshot; for finding where a plan's peak differs)")
    args = parser.parse_args()

    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = torch.device("cuda", torch.cuda.current_device())
        context_used = device_used(device)  # before NCCL: the CUDA context (and other processes)
    else:
        device, context_used = torch.device("cpu"), None
    dist.init_process_group(args.backend or ("nccl" if device.type == "cuda" else "gloo"),
                            device_id=device if device.type == "cuda" else None,
                            timeout=datetime.timedelta(seconds=args.timeout))
    world, rank = dist.get_world_size(), dist.get_rank()
    probe = torch.ones(1, device=device)
    dist.all_reduce(probe)  # the world communicator made now, so its buffers are in the next figure
    synchronize(device)
    environment = {"torch": torch.__version__, "world": world, "device": str(device),
                   "context_used": context_used, "world_comm_used": device_used(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        environment.update(gpu=props.name, total_memory=props.total_memory, cuda=torch.version.cuda,
                           nccl=str(torch.cuda.nccl.version()),
                           env={k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_", "PYTORCH_"))})
    for size in args.size:
        c = SIZES[size]
        for layout in args.layouts:
            if not allowed(layout, world, c):
                continue
            record = {"size": size, "config": asdict(c), "params": c.params, "layout": layout,
                      "mesh": dict(zip(("pp", "dp", "tp"), mesh_shape(layout, world))), "environment": environment}
            try:
                snapshot = os.path.join(args.snapshot, f"{size}-{layout}-rank{rank}.pickle") if args.snapshot else None
                mine = measure(layout, c, device, args.warmup, args.steps, snapshot)
            except torch.OutOfMemoryError as error:  # a layout too big for this GPU: recorded, the rest go on
                mine = {"rank": rank, "error": str(error).splitlines()[0][:300]}
            ranks: list = [None] * world
            dist.all_gather_object(ranks, mine)
            if rank == 0:
                record["ranks"] = ranks
                with open(args.out, "a") as f:
                    f.write(json.dumps(record) + "\n")
                medians = [r.get("step_ms") for r in ranks]
                peaks = [r.get("max_reserved") for r in ranks]
                print(f"step_reference: world {world} {size} {layout}: step ms {medians} max_reserved {peaks}",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

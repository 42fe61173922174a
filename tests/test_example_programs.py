"""The project's corpus of ordinary multi-GPU PyTorch training programs (examples/programs/), each
run unmodified under `simgpu run --gpus N` and checked against a single-process CPU reference that
computes the same numbers without any distributed code.

Every program prints `step <i> loss <value>` once per step (rank 0, or the rank that holds the
loss) and `final <sum of all parameters, gathered to full values>`. Each reference below is the
plain-PyTorch equivalent: data parallelism over a global batch split across ranks is training on
the global batch with the mean loss; FSDP / TP / SP / pipelining are the unsharded model. The
global batch is fixed, so the reference does not depend on the number of GPUs.

Every program runs on 2 simulated GPUs, the two on a 2-D mesh (hsdp, fsdp_tp) on 4, the 3-D one
(fsdp_tp_pp) on 8; with --full also on 4 (those two on 8, the 3-D one on 64). `-k gpus2` selects one
GPU count.

Section 13 holds public-style programs (r31) with APIs the others do not use; their variants (the other
pipeline schedules, CPU offload, async_save's process mode) run with --full.
"""
from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.processes import run_bounded
from tests.tiers import first_then_full

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "examples" / "programs"
TIMEOUT = 300
RTOL, ATOL = 1e-4, 1e-5

def _has(feature: str) -> bool:
    """"module:attribute" exists in the installed torch (a program needs it as written)."""
    import importlib

    module, _, attribute = feature.partition(":")
    try:
        found = importlib.import_module(module)
    except ImportError:
        return False
    return not attribute or hasattr(found, attribute)


def _pipeline_stage_infers_shapes() -> bool:
    """torch >= 2.5: PipelineStage(module, stage_index, num_stages, device) infers its inputs."""
    import inspect

    try:
        from torch.distributed.pipelining import PipelineStage
    except ImportError:
        return False
    argument = inspect.signature(PipelineStage).parameters.get("input_args")
    return argument is None or argument.default is not inspect.Parameter.empty


def needs(*features: str) -> pytest.MarkDecorator:
    """Run only where the installed torch has what the program uses ("where the torch feature
    exists"); elsewhere skip, naming what is missing."""
    missing = [f for f in features if not (_pipeline_stage_infers_shapes() if f == "pipelining-shape-inference"
                                           else _has(f))]
    return pytest.mark.skipif(bool(missing), reason=f"torch {torch.__version__} has no {', '.join(missing)}")


def gpus(*counts: int) -> pytest.MarkDecorator:
    """parametrize over GPU counts, ids gpus2 / gpus4 / gpus8; the larger counts run with --full."""
    return pytest.mark.parametrize("n", first_then_full(counts, [f"gpus{n}" for n in counts]))


# -- running a program -------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def simgpu_run(n: int, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """`simgpu run --gpus n ARGS...` in a fresh process; torchrun is found beside sys.executable."""
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", str(n), *args]
    return run_bounded(cmd, timeout, cwd=ROOT, env=env)


_SECONDARY = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def decisive(stderr: str, keep: int = 30) -> str:
    """The end of the failing rank's traceback (torchrun prefixes each worker's lines with [rankN]:): the
    first rank to print a traceback that is not a consequence of another rank's exit (gloo's "Connection
    closed by peer"), else the first to print one; then torchrun's root-cause block (exit code or signal
    of a rank that died without a traceback). With no rank lines, the end of stderr."""
    lines = stderr.splitlines()
    by_rank: dict[str, list[str]] = {}
    order: list[str] = []
    for line in lines:
        m = re.match(r"(\[rank\d+\]:)", line)
        if m:
            by_rank.setdefault(m[1], []).append(line)
            if "Traceback (most recent call last)" in line and m[1] not in order:
                order.append(m[1])
    primary = [r for r in order if not any(s in l for l in by_rank[r] for s in _SECONDARY)]
    chosen = (primary or order or [None])[0]
    own = by_rank[chosen][-keep:] if chosen else lines[-keep:]
    root = next((i for i, l in enumerate(lines) if "Root Cause (first observed failure)" in l), None)
    if root is not None:
        own += ["", "torchrun:"] + [l for l in lines[root:root + 12] if l.strip()]
    return "\n".join(own)


def launch(n: int, name: str, *args: str, torchrun: bool = False, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    script = str(PROGRAMS / f"{name}.py")
    if torchrun:
        return simgpu_run(n, "torchrun", "--nproc-per-node", str(n), "--master-port", str(free_port()),
                          script, *args, timeout=timeout)
    return simgpu_run(n, script, *args, timeout=timeout)


def parse(n: int, name: str, done: subprocess.CompletedProcess) -> tuple[list[float], float]:
    """The step losses and the final value a program printed (it must have exited 0)."""
    if done.returncode != 0:
        pytest.fail(f"{name} on {n} GPUs exited {done.returncode}\nstdout:\n{done.stdout}\n"
                    f"stderr (decisive part):\n{decisive(done.stderr)}", pytrace=False)
    losses = {int(m[1]): float(m[2]) for m in re.finditer(r"^step (\d+) loss (\S+)$", done.stdout, re.M)}
    finals = re.findall(r"^final (\S+)$", done.stdout, re.M)
    assert losses and len(finals) == 1, done.stdout
    assert sorted(losses) == list(range(len(losses))), done.stdout
    return [losses[i] for i in range(len(losses))], float(finals[0])


def run_program(n: int, name: str, *args: str, torchrun: bool = False,
                timeout: float = TIMEOUT) -> tuple[list[float], float]:
    return parse(n, name, launch(n, name, *args, torchrun=torchrun, timeout=timeout))


def check(got: tuple[list[float], float], want: tuple[list[float], float],
          rtol: float = RTOL, atol: float = ATOL) -> None:
    (losses, final), (ref_losses, ref_final) = got, want
    assert len(losses) == len(ref_losses), (losses, ref_losses)
    for i, (a, b) in enumerate(zip(losses, ref_losses)):
        assert math.isclose(a, b, rel_tol=rtol, abs_tol=atol), f"step {i}: loss {a} != reference {b}"
    assert math.isclose(final, ref_final, rel_tol=rtol, abs_tol=atol), f"final {final} != reference {ref_final}"


def reference(fn):
    """A reference computation seeds torch's global generator: fork it, so that the pytest
    process's random state is left as it was."""
    def wrapped(*args):
        with torch.random.fork_rng(devices=[]):
            return fn(*args)
    wrapped.__name__ = fn.__name__
    return wrapped


def param_sum(model: nn.Module) -> float:
    return sum(p.detach().sum() for p in model.parameters()).item()


# -- 1. ddp_spawn --------------------------------------------------------------------------------

class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


@reference
def ref_ddp_spawn():
    """DistributedSampler(shuffle, seed 7, epoch 0) gives rank r perm[r::ws]; step i's batches of
    16/ws on every rank together are perm[16i:16(i+1)]. The checkpoint round trip is the identity."""
    g = torch.Generator().manual_seed(1234)
    x, y = torch.randn(80, 10, generator=g), torch.randn(80, 5, generator=g)
    perm = torch.randperm(80, generator=torch.Generator().manual_seed(7))
    torch.manual_seed(0)
    model = ToyModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(5):
        idx = perm[16 * step:16 * (step + 1)]
        opt.zero_grad()
        loss = F.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_ddp_spawn(n):
    check(run_program(n, "ddp_spawn", str(free_port())), ref_ddp_spawn())


# -- 2. ddp_torchrun -----------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


@reference
def ref_ddp_torchrun():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(42)
    losses = []
    for _ in range(4):
        x = torch.randn(16, 8, generator=g)
        y = torch.randint(0, 3, (16,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_ddp_torchrun(n):
    check(run_program(n, "ddp_torchrun", torchrun=True), ref_ddp_torchrun())


# -- 3. data_parallel, model_parallel --------------------------------------------------------------

class DPModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 48)
        self.bn = nn.LayerNorm(48)
        self.fc2 = nn.Linear(48, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.bn(self.fc1(x))))


@reference
def ref_data_parallel():
    torch.manual_seed(0)
    model = DPModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    g = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(4):
        x, y = torch.randn(16, 12, generator=g), torch.randn(16, 4, generator=g)
        opt.zero_grad()
        loss = F.smooth_l1_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_data_parallel(n):
    check(run_program(n, "data_parallel"), ref_data_parallel())


@reference
def ref_model_parallel():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 5))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(4):
        x, y = torch.randn(16, 10, generator=g), torch.randn(16, 5, generator=g)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_model_parallel(n):
    check(run_program(n, "model_parallel"), ref_model_parallel())


# -- 4. fsdp2, fsdp2_mesh ------------------------------------------------------------------------

VOCAB, TDIM, HEADS, SEQ = 64, 32, 4, 8


class TBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(TDIM)
        self.attn = nn.MultiheadAttention(TDIM, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(TDIM)
        self.mlp = nn.Sequential(nn.Linear(TDIM, 4 * TDIM), nn.GELU(), nn.Linear(4 * TDIM, TDIM))

    def forward(self, x):
        h = self.ln1(x)
        mask = torch.triu(torch.ones(x.size(1), x.size(1), dtype=torch.bool), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, TDIM)
        self.pos = nn.Parameter(torch.randn(SEQ, TDIM) * 0.02)
        self.layers = nn.ModuleList(TBlock() for _ in range(2))
        self.norm = nn.LayerNorm(TDIM)
        self.out = nn.Linear(TDIM, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


@reference
def ref_fsdp2():
    torch.manual_seed(0)
    model = Transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(11)
    losses = []
    for _ in range(4):
        tokens = torch.randint(0, VOCAB, (8, SEQ + 1), generator=g)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("torch.distributed.fsdp:fully_shard", "torch.distributed.tensor:DTensor")
def test_fsdp2(n):
    check(run_program(n, "fsdp2", torchrun=True), ref_fsdp2())


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x))))


class ResidualModel(nn.Module):
    def __init__(self, dim=24, depth=3):
        super().__init__()
        self.inp = nn.Linear(6, dim)
        self.blocks = nn.ModuleList(ResidualBlock(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@reference
def ref_fsdp2_mesh():
    torch.manual_seed(0)
    model = ResidualModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(21)
    x_all, y_all = torch.randn(5, 32, 6, generator=g), torch.randn(5, 32, 2, generator=g)
    losses = []
    for step in range(5):
        opt.zero_grad()
        loss = F.mse_loss(model(x_all[step]), y_all[step])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("torch.distributed.fsdp:fully_shard")
def test_fsdp2_mesh(n):
    check(run_program(n, "fsdp2_mesh", torchrun=True), ref_fsdp2_mesh())


# -- 5. fsdp1, hsdp ------------------------------------------------------------------------------

class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(8 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


@reference
def ref_fsdp1(world_size):
    """Each rank's loss is a sum over its samples and FSDP averages the gradients over ranks, so
    the gradient is that of (sum over the global batch) / world_size: the only place the world
    size enters (Adam is almost invariant to it, up to eps). The logged loss is the global mean."""
    torch.manual_seed(0)
    model = ConvNet()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(8)
    losses = []
    for _ in range(4):
        data = torch.randn(16, 1, 12, 12, generator=g)
        target = torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        loss = F.nll_loss(model(data), target, reduction="sum")
        (loss / world_size).backward()
        opt.step()
        losses.append(loss.item() / 16)
    return losses, param_sum(model)


@gpus(2, 4)
def test_fsdp1(n):
    check(run_program(n, "fsdp1", torchrun=True), ref_fsdp1(n))


class HLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x + torch.relu(self.fc(x)))


class HModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(10, 32)
        self.layers = nn.Sequential(*[HLayer(32) for _ in range(3)])
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.layers(self.embed(x))).squeeze(-1)


@reference
def ref_hsdp():
    torch.manual_seed(0)
    model = HModel()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(99)
    w_true = torch.randn(10, generator=g)
    losses = []
    for _ in range(4):
        x = torch.randn(16, 10, generator=g)
        y = x @ w_true + 0.1 * torch.randn(16, generator=g)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(4, 8)
def test_hsdp(n):
    check(run_program(n, "hsdp", torchrun=True), ref_hsdp())


# -- 6. tensor_parallel, sequence_parallel ---------------------------------------------------------

@reference
def ref_tensor_parallel():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(17)
    losses = []
    for _ in range(5):
        inp, target = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
        loss = F.mse_loss(model(inp), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("torch:accelerator")
def test_tensor_parallel(n):
    check(run_program(n, "tensor_parallel", torchrun=True), ref_tensor_parallel())


class SPBlock(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.in_proj = nn.Linear(dim, 4 * dim)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.out_proj(self.relu(self.in_proj(self.norm(x))))


@reference
def ref_sequence_parallel():
    torch.manual_seed(0)
    model = SPBlock()
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    g = torch.Generator().manual_seed(2)
    losses = []
    for _ in range(4):
        inp, target = torch.randn(4, 16, 16, generator=g), torch.randn(4, 16, 16, generator=g)
        loss = F.mse_loss(model(inp), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("torch.distributed.tensor:Shard")
def test_sequence_parallel(n):
    check(run_program(n, "sequence_parallel", torchrun=True), ref_sequence_parallel())


# -- 7. fsdp_tp ----------------------------------------------------------------------------------

class FeedForward(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w3 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class FFBlock(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.feed_forward = FeedForward(dim)

    def forward(self, x):
        return x + self.feed_forward(self.norm(x))


class FFModel(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.inp = nn.Linear(10, dim)
        self.layers = nn.ModuleList(FFBlock(dim) for _ in range(2))
        self.out = nn.Linear(dim, 3)

    def forward(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


@reference
def ref_fsdp_tp():
    torch.manual_seed(0)
    model = FFModel()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(4)
    losses = []
    for _ in range(4):
        x, y = torch.randn(16, 10, generator=g), torch.randint(0, 3, (16,), generator=g)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(4, 8)
@needs("torch.distributed.fsdp:fully_shard")
def test_fsdp_tp(n):
    check(run_program(n, "fsdp_tp", torchrun=True), ref_fsdp_tp())


# -- 8. dcp_checkpoint ---------------------------------------------------------------------------

class TanhModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 32), nn.Linear(32, 32), nn.Linear(32, 32)])
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x).squeeze(-1)


@reference
def ref_dcp_checkpoint():
    """The save / load round trip is the identity: 3 + 2 steps of plain training."""
    torch.manual_seed(0)
    model = TanhModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(31)
    losses = []
    for _ in range(5):
        x = torch.randn(16, 8, generator=g)
        loss = F.mse_loss(model(x), x.sum(-1).sin())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("torch.distributed.fsdp:fully_shard", "torch.distributed.checkpoint.state_dict:get_state_dict")
def test_dcp_checkpoint(n, tmp_path):
    check(run_program(n, "dcp_checkpoint", str(tmp_path / "ckpt"), torchrun=True), ref_dcp_checkpoint())


# -- 9. pipeline ---------------------------------------------------------------------------------

class PipeModel(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.embed = nn.Linear(6, dim)
        self.layers = nn.ModuleDict({str(i): nn.Sequential(nn.Linear(dim, dim), nn.Tanh()) for i in range(4)})
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers.values():
            h = layer(h)
        return self.head(h)


@reference
def ref_pipeline():
    """GPipe over 4 equal microbatches: the mean of the microbatch losses is the batch's mean
    loss, and the schedule scales the accumulated gradients by 1/4 (scale_grads)."""
    torch.manual_seed(0)
    model = PipeModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    g = torch.Generator().manual_seed(6)
    losses = []
    for _ in range(4):
        x, y = torch.randn(16, 6, generator=g), torch.randn(16, 2, generator=g)
        opt.zero_grad()
        mb_losses = [F.mse_loss(model(xm), ym) for xm, ym in zip(x.chunk(4), y.chunk(4))]
        (sum(mb_losses) / 4).backward()
        opt.step()
        losses.append(torch.stack(mb_losses).mean().item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("pipelining-shape-inference")
def test_pipeline(n):
    check(run_program(n, "pipeline", torchrun=True), ref_pipeline())


# -- 10. funcol ----------------------------------------------------------------------------------

@reference
def ref_funcol():
    """reduce_scatter (sum) / world_size of the flat gradient, momentum SGD on each shard, all_gather
    of the shards: torch.optim.SGD(momentum=0.9) on the global batch's mean loss."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(77)
    losses = []
    for _ in range(5):
        x = torch.randn(16, 12, generator=g)
        y = (x[:, :3].sum(-1, keepdim=True) > 0).float()
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_funcol(n):
    check(run_program(n, "funcol", torchrun=True), ref_funcol())


# -- 10b. fsdp_tp_pp: 3-D parallelism ------------------------------------------------------------

@reference
def ref_fsdp_tp_pp():
    """The program's own transformer, batches and loss on one process: pipelining's 4 equal
    microbatches (gradients scaled by 1/4) averaged by FSDP over dp are the global batch's mean loss;
    tensor parallelism splits the sums of the same products."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fsdp_tp_pp", PROGRAMS / "fsdp_tp_pp.py")
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    torch.manual_seed(0)
    model = program.Transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    losses = []
    for tokens, targets in program.batches(torch.Generator().manual_seed(11)):
        opt.zero_grad()
        loss = program.loss_fn(model(tokens), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(8, 64)
@needs("torch.distributed.fsdp:fully_shard", "pipelining-shape-inference")
def test_fsdp_tp_pp(n):
    """FSDP2 x tensor parallel x pipeline on a 2 x 2 x 2 mesh (8 GPUs), with --full on 4 x 4 x 4 (64)."""
    check(run_program(n, "fsdp_tp_pp", torchrun=True, timeout=TIMEOUT if n <= 8 else 1200), ref_fsdp_tp_pp())


# -- 11. compile_ddp -----------------------------------------------------------------------------

class CModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


@reference
def ref_compile_ddp():
    torch.manual_seed(0)
    model = CModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(9)
    losses = []
    for _ in range(3):
        x, y = torch.randn(16, 10, generator=g), torch.randn(16, 4, generator=g)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_compile_ddp(n):
    """torch.compile runs the program eagerly on simulated GPUs and says so once per process
    (docs/cuda-simulation.md): the reference's numbers, and the notice on every rank."""
    done = launch(n, "compile_ddp", torchrun=True)
    check(parse(n, "compile_ddp", done), ref_compile_ddp())
    notices = done.stderr.count("simgpu: torch.compile runs eagerly on simulated GPUs")
    assert notices == n, f"expected the notice once per rank, got {notices}:\n{done.stderr[-2000:]}"


# -- 12. amp_ddp ---------------------------------------------------------------------------------

AMP_RTOL, AMP_ATOL = 2e-3, 1e-3


@reference
def ref_amp_ddp():
    """What a GPU computes: matmuls in float16 under autocast (the CPU's autocast gives the same
    casts), the loss scaled by GradScaler. A float16 forward agrees with float32 to about 1e-3
    relative (measured: 4e-5 on these numbers), hence AMP_RTOL: the simulator keeps float32 (autocast("cuda") does not cast on CPU
    tensors, docs/simgpu-run.md), and a GPU's float16 kernels round differently from the CPU's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu")
    g = torch.Generator().manual_seed(13)
    losses = []
    for _ in range(4):
        x, y = torch.randn(32, 16, generator=g), torch.randint(0, 8, (32,), generator=g)
        opt.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.float().item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_amp_ddp(n):
    check(run_program(n, "amp_ddp", torchrun=True), ref_amp_ddp(), rtol=AMP_RTOL, atol=AMP_ATOL)


# -- 13. public-style programs (r31): APIs the programs above do not use -------------------------

def _program(name: str):
    """A program's own module (its model, data and schedule), for the single-process reference."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, PROGRAMS / f"{name}.py")
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    return program


@reference
def ref_ddp_trainer():
    """ZeroRedundancyOptimizer(AdamW) is AdamW; no_sync accumulation of ACCUMULATION microbatches of
    equal size, each loss divided by ACCUMULATION, averaged over ranks, is the global batch's mean loss;
    the unshuffled DistributedSampler's batches together are the global batch, in order."""
    program = _program("ddp_trainer")
    torch.manual_seed(0)
    model = program.Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    x, y = program.dataset().tensors
    losses = []
    for step in range(program.STEPS):
        batch = slice(step * program.GLOBAL_BATCH, (step + 1) * program.GLOBAL_BATCH)
        loss = F.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_ddp_trainer(n):
    """mp.spawn, DataLoader workers with pinned memory, a side-stream prefetcher, no_sync, ZeRO-1, NVTX."""
    check(run_program(n, "ddp_trainer", str(free_port())), ref_ddp_trainer())


@reference
def ref_pipeline_schedules():
    """Every schedule computes the same thing: 4 equal microbatches (gradients scaled by 1/4), the global
    gradient norm clipped to 1 (the program sums squared norms over ranks), AdamW with a warm-up."""
    program = _program("pipeline_schedules")
    torch.manual_seed(0)
    model = program.Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 2))
    g = torch.Generator().manual_seed(61)
    losses = []
    for _ in range(program.STEPS):
        x, y = torch.randn(program.BATCH, 6, generator=g), torch.randn(program.BATCH, 2, generator=g)
        opt.zero_grad()
        mb = [program.loss_fn(model(xm), ym) for xm, ym in zip(x.chunk(program.N_MICROBATCHES),
                                                               y.chunk(program.N_MICROBATCHES))]
        (sum(mb) / program.N_MICROBATCHES).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        scheduler.step()
        losses.append(torch.stack(mb).mean().item())
    return losses, param_sum(model)


PIPELINE_SCHEDULES = ["Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "LoopedBFS"]


@gpus(2, 4)
@pytest.mark.parametrize("schedule", first_then_full(PIPELINE_SCHEDULES, PIPELINE_SCHEDULES))
@needs("pipelining-shape-inference", "torch.distributed.pipelining:ScheduleInterleavedZeroBubble",
       "torch.distributed.pipelining:ScheduleZBVZeroBubble")
def test_pipeline_schedules(n, schedule):
    """Two stages per rank under the multi-stage schedules (zero-bubble ones split weight gradients)."""
    check(run_program(n, "pipeline_schedules", schedule, torchrun=True), ref_pipeline_schedules())


@reference
def ref_fsdp2_flex_sac():
    """The unsharded model with FlexAttention's document mask written out as a dense SDPA mask; accumulation
    of 2 equal microbatches of loss / 2 over ranks is the global batch's mean loss."""
    program = _program("fsdp2_flex_sac")
    docs = program.document_ids(program.SEQ)
    i = torch.arange(program.SEQ)
    mask = (docs[:, None] == docs[None, :]) & (i[:, None] >= i[None, :])
    program.attention = lambda q, k, v, block_mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.manual_seed(0)
    model = program.Transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, program.lr_lambda)
    losses = []
    for tokens in program.batches(torch.Generator().manual_seed(5)):
        loss = F.cross_entropy(model(tokens[:, :-1], None).reshape(-1, program.VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        scheduler.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@pytest.mark.parametrize("offload", first_then_full([False, True], ["gpu", "offload"]))
@needs("torch.distributed.fsdp:fully_shard", "torch.nn.attention.flex_attention:create_block_mask",
       "torch.utils.checkpoint:create_selective_checkpoint_contexts")
def test_fsdp2_flex_sac(n, offload):
    """Meta-device init, FlexAttention document mask, selective checkpointing, compiled blocks, accumulation
    with set_requires_gradient_sync; with CPUOffloadPolicy under --full."""
    check(run_program(n, "fsdp2_flex_sac", *(["--offload"] if offload else []), torchrun=True), ref_fsdp2_flex_sac())


@reference
def ref_dcp_async_resume():
    """The checkpoint/restart is the identity (the program asserts the resumed losses repeat the first run's):
    6 steps over DistributedSampler(shuffle, seed 3)'s permutation, AdamW with StepLR."""
    program = _program("dcp_async_resume")
    torch.manual_seed(0)
    model = program.Model()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x, y = program.dataset().tensors
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(3))
    losses = []
    for step in range(program.STEPS):
        idx = perm[step * program.GLOBAL_BATCH:(step + 1) * program.GLOBAL_BATCH]
        loss = F.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        scheduler.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@pytest.mark.parametrize("checkpointer", first_then_full(["thread", "process"], ["thread", "process"]))
@needs("torch.distributed.checkpoint:async_save", "torch.distributed.checkpoint.state_dict_saver:AsyncCheckpointerType")
def test_dcp_async_resume(n, checkpointer, tmp_path):
    """async_save on the default "cuda:nccl,cpu:gloo" group while training goes on, then a restart."""
    check(run_program(n, "dcp_async_resume", str(tmp_path / "ckpt"), checkpointer, torchrun=True),
          ref_dcp_async_resume())


@reference
def ref_context_parallel_llm():
    """Context parallelism splits the sequence, FSDP the parameters: the full sequence on one process."""
    program = _program("context_parallel_llm")
    torch.manual_seed(0)
    model = program.GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    positions = torch.arange(program.SEQ).expand(program.BATCH, program.SEQ)
    losses = []
    for tokens in program.batches(torch.Generator().manual_seed(23)):
        loss = F.cross_entropy(model(tokens[:, :-1], positions).reshape(-1, program.VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("torch.distributed.tensor.experimental:context_parallel", "torch.distributed.fsdp:fully_shard")
def test_context_parallel_llm(n):
    """The ring merges partial attention in another order than one softmax: float32 differences of 1e-7,
    which AdamW's normalised step turns into whole steps (2e-3) where a gradient is near 0. The final sum
    of ~40k parameters is near 0.6 and moved by up to 2.3e-4 (4 GPUs; 4e-5 on 2), hence atol 1e-3 (the
    losses, about 4.7, are held to rtol 1e-4 as everywhere)."""
    check(run_program(n, "context_parallel_llm", torchrun=True), ref_context_parallel_llm(), atol=1e-3)


@reference
def ref_tp_loss_parallel():
    program = _program("tp_loss_parallel")
    torch.manual_seed(0)
    model = program.Transformer()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for tokens in program.batches(torch.Generator().manual_seed(8)):
        loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten(0, 1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
@needs("torch.distributed.tensor.parallel:loss_parallel")
def test_tp_loss_parallel(n):
    check(run_program(n, "tp_loss_parallel", torchrun=True), ref_tp_loss_parallel())


@reference
def ref_amp_fp16_compile():
    """The host's float16 autocast and GradScaler (AMP_RTOL: ref_amp_ddp says why); the first step
    overflows at 2**30 on any number of GPUs and the scale then stays far from overflow, so the scales and
    the skipped step are CUDA's exactly."""
    program = _program("amp_fp16_compile")
    torch.manual_seed(0)
    model = program.Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=program.INIT_SCALE, backoff_factor=program.BACKOFF,
                                  growth_interval=3)
    losses, scales = [], []
    for x, y in program.data(torch.Generator().manual_seed(77)):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        losses.append(loss.float().item())
        scales.append(scaler.get_scale())
    return (losses, param_sum(model)), scales


@gpus(2, 4)
def test_amp_fp16_compile(n):
    done = launch(n, "amp_fp16_compile", torchrun=True)
    (losses, final), scales = ref_amp_fp16_compile()
    check(parse(n, "amp_fp16_compile", done), (losses, final), rtol=AMP_RTOL, atol=AMP_ATOL)
    printed = [float(s) for s in re.findall(r"^scale \d+ (\S+)$", done.stdout, re.M)]
    assert printed == scales, (printed, scales)
    assert re.search(r"^skipped 1$", done.stdout, re.M), done.stdout


@reference
def ref_megatron_tp():
    """The unsplit model the program splits its master weights from; clipping to a global norm of 1."""
    program = _program("megatron_tp")
    torch.manual_seed(0)
    model = program.Reference()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for tokens in program.batches(torch.Generator().manual_seed(19)):
        loss = F.cross_entropy(model(tokens[:, :-1]).reshape(-1, program.VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_megatron_tp(n):
    """Hand-written column/row/vocab-parallel layers over autograd Functions, a CUDA RNG tracker."""
    check(run_program(n, "megatron_tp", torchrun=True), ref_megatron_tp())


# -- 14. cuda_graph_dp -----------------------------------------------------------------------------

@reference
def ref_cuda_graph_dp():
    """The global batch's mean loss and Adam, for the warm-up steps and then the replayed ones."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(42)
    batches = [(torch.randn(32, 16, generator=g), torch.randn(32, 4, generator=g)) for _ in range(3 + 5)]
    losses = []
    for i, (x, y) in enumerate(batches):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if i >= 3:
            losses.append(loss.item())
    return losses, param_sum(model)


@gpus(2, 4)
def test_cuda_graph_dp(n):
    """The whole step (forward, backward, the gradients' all_reduce, a capturable Adam step) in a CUDA graph."""
    check(run_program(n, "cuda_graph_dp", torchrun=True), ref_cuda_graph_dp())

"""The project's corpus of ordinary multi-GPU PyTorch training programs (examples/programs/), each
run unmodified under `simgpu run --gpus N` and checked against a single-process CPU reference that
computes the same numbers without any distributed code.

Every program prints `step <i> loss <value>` once per step (rank 0, or the rank that holds the
loss) and `final <sum of all parameters, gathered to full values>`. Each reference below is the
plain-PyTorch equivalent: data parallelism over a global batch split across ranks is training on
the global batch with the mean loss; FSDP / TP / SP / pipelining are the unsharded model. The
global batch is fixed, so the reference does not depend on the number of GPUs.

The 2-GPU cases run by default. The 4-GPU cases, and the programs that need a 2-D mesh of
4 GPUs, are marked `four_gpus`: they run only with SIMGPU_EXAMPLES_FULL=1 (select them with
`-k gpus4`).
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

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "examples" / "programs"
TIMEOUT = 300
RTOL, ATOL = 1e-4, 1e-5

FULL = os.environ.get("SIMGPU_EXAMPLES_FULL") == "1"
four_gpus = pytest.mark.skipif(not FULL, reason="4-GPU case: set SIMGPU_EXAMPLES_FULL=1")


def gpus(*counts: int) -> pytest.MarkDecorator:
    """parametrize over GPU counts, ids gpus2 / gpus4; counts above 2 are marked four_gpus."""
    return pytest.mark.parametrize(
        "n", [pytest.param(n, id=f"gpus{n}", marks=[four_gpus] if n > 2 else []) for n in counts])


# -- running a program -------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def simgpu_run(n: int, *args: str) -> subprocess.CompletedProcess:
    """`simgpu run --gpus n ARGS...` in a fresh process; torchrun is found beside sys.executable."""
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", str(n), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT, env=env)


def run_program(n: int, name: str, *args: str, torchrun: bool = False) -> tuple[list[float], float]:
    script = str(PROGRAMS / f"{name}.py")
    if torchrun:
        done = simgpu_run(n, "torchrun", "--nproc-per-node", str(n), "--master-port", str(free_port()),
                          script, *args)
    else:
        done = simgpu_run(n, script, *args)
    assert done.returncode == 0, f"{name} on {n} GPUs exited {done.returncode}\n{done.stdout}\n{done.stderr[-6000:]}"
    losses = {int(m[1]): float(m[2]) for m in re.finditer(r"^step (\d+) loss (\S+)$", done.stdout, re.M)}
    finals = re.findall(r"^final (\S+)$", done.stdout, re.M)
    assert losses and len(finals) == 1, done.stdout
    assert sorted(losses) == list(range(len(losses))), done.stdout
    return [losses[i] for i in range(len(losses))], float(finals[0])


def check(got: tuple[list[float], float], want: tuple[list[float], float],
          rtol: float = RTOL, atol: float = ATOL) -> None:
    (losses, final), (ref_losses, ref_final) = got, want
    assert len(losses) == len(ref_losses), (losses, ref_losses)
    for i, (a, b) in enumerate(zip(losses, ref_losses)):
        assert math.isclose(a, b, rel_tol=rtol, abs_tol=atol), f"step {i}: loss {a} != reference {b}"
    assert math.isclose(final, ref_final, rel_tol=rtol, abs_tol=atol), f"final {final} != reference {ref_final}"


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

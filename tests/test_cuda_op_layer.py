"""Ops whose CUDA kernels differ from the host's in dtype, shape or answer (issue 26, found by the every-sample
OpInfo sweep on a GPU box): half-precision batch/layer norm statistics, LU without pivoting, trace under
autocast, integer remainder by zero, float16 rrelu. The program runs under `simgpu run` in a fresh process."""
from __future__ import annotations

import json
from pathlib import Path

from tests.test_simgpu_run import SCRIPTS, simgpu_run

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "benchmarks" / "cuda_references" / "integer_remainder_by_zero.py"
GPU_ANSWERS = REPO / "tests" / "simulated_device" / "cuda_reference" / "op-answers-torch-2.11.0-cu130.jsonl"


def test_cuda_op_layer_on_simulated_gpus() -> None:
    done = simgpu_run(2, str(SCRIPTS / "cuda_op_layer.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK cuda_op_layer" in done.stdout


def test_op_answers_equal_an_h200s() -> None:
    """The probe's answers (integer remainder/fmod by zero for every integer dtype, LU without pivoting and its
    zero pivot, half-precision norm statistics, trace under autocast) under simulation equal the ones an H200
    printed, line by line (the record's meta line says where and how it was made)."""
    lines = [json.loads(line) for line in GPU_ANSWERS.read_text().splitlines()]
    assert "meta" in lines[0]
    want = {k: v for line in lines[1:] for k, v in line.items()}
    done = simgpu_run(1, str(PROBE))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    got = {k: v for line in done.stdout.splitlines() if line.startswith("{") for k, v in json.loads(line).items()}
    got.pop("torch")
    differ = {k: (want.get(k), got.get(k)) for k in want.keys() | got.keys() if want.get(k) != got.get(k)}
    assert not differ, f"simulated vs H200 (key: (H200, simulated)): {differ}"


def test_autocast_follows_the_installed_torchs_lists(monkeypatch) -> None:
    """The autocast table is torch 2.13's lists; a torch whose CUDA autocast lacks an op (rms_norm before 2.13:
    the every-sample sweep on torch 2.11 found it cast to float32 where CUDA kept the input's dtype) leaves it
    alone, and a torch that registers none of them keeps the whole table."""
    import torch

    from simgpu.cuda_sim import autocast

    real = torch._C._dispatch_has_kernel_for_dispatch_key
    installed = autocast.installed_lists()
    assert installed and installed <= set(autocast.table())  # torch 2.13 and 2.15: every listed op
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key",
                        lambda name, key: name != "aten::rms_norm" and real(name, key))
    assert autocast.installed_lists() == installed - {"aten::rms_norm"}
    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", lambda name, key: False)
    assert autocast.installed_lists() is None

"""Programs written the way public trainers are written (benchmarks/public_style/) print on 2 simulated GPUs
what they printed on 2 H200s (benchmarks/results/public-style-h200-x2-2026-11-26/real/): every number of
every reported line within the program's rounding, every other word equal; wall times are not compared.

The tolerances are the programs' precisions: bf16/fp16 autocast moves a loss by a few 1e-4, cuDNN's
convolutions and fused kernels by less; a program in float32 with CUDA's random streams is exact. Peak
memory is held to 5% (the allocator model's promise)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_env

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "benchmarks/public_style"
REAL = ROOT / "benchmarks/results/public-style-h200-x2-2026-11-26/real"
NUMBER = re.compile(r"^[-+]?\d+(\.\d+)?(e[-+]?\d+)?,?$")
MEMORY_WORDS = ("mem", "MiB")  # a number after these is a peak: held to 5%
TIME_WORDS = ("time", "ms")    # a number after these is a wall time: not compared


def _launch(program: str) -> list[str]:
    if program == "timm_style.py":  # mp.spawn from a plain interpreter
        return [sys.executable, str(PROGRAMS / program)]
    return ["torchrun", "--standalone", "--nproc-per-node", "2", str(PROGRAMS / program)]


# (program, environment, log name, relative tolerance of the numbers, tier)
CASES = [
    ("resume_style.py", {}, "resume_style", 0.0, "default"),
    ("moe_ep_style.py", {}, "moe_ep_style", 1e-5, "default"),
    ("serve_style.py", {}, "serve_style", 1e-5, "default"),
    ("clip_style.py", {}, "clip_style", 1e-4, "full"),
    ("nanogpt_style.py", {"COMPILE": "0", "ATTN_DROPOUT": "0"}, "nanogpt_style_eager_noattndrop", 2e-3, "full"),
    ("fsdp1_hf_style.py", {}, "fsdp1_hf_style", 5e-4, "full"),
    ("timm_style.py", {}, "timm_style", 1e-3, "full"),
]


def _reported(text: str) -> list[list[str]]:
    """The lines a program reports (rank 0's prints), split into words."""
    keep = ("step ", "iter ", "epoch ", "sample", "full", "resumed", "resume equal", "eval", "keys", "ema",
            "optim", "peak")
    return [line.split() for line in text.splitlines() if line.startswith(keep)]


def compare(real_text: str, sim_text: str, rtol: float) -> list[str]:
    """The differences between the two outputs, one line each (empty: they agree)."""
    real, sim = _reported(real_text), _reported(sim_text)
    if len(real) != len(sim):
        return [f"{len(real)} reported lines on the GPUs, {len(sim)} simulated"]
    return [f"GPU: {' '.join(a)} | simulated: {' '.join(b)}" for a, b in zip(real, sim) if not _agree(a, b, rtol)]


def _agree(real: list[str], sim: list[str], rtol: float) -> bool:
    if len(real) != len(sim):
        return False
    for i, (a, b) in enumerate(zip(real, sim)):
        before, after = (real[i - 1] if i else ""), (real[i + 1] if i + 1 < len(real) else "")
        if before in TIME_WORDS or a.rstrip(",").endswith("ms"):
            continue                                        # a wall time
        if NUMBER.match(a) and NUMBER.match(b):
            x, y = float(a.rstrip(",")), float(b.rstrip(","))
            tolerance = 0.05 if before in MEMORY_WORDS or after == "MiB" else rtol
            if abs(x - y) > tolerance * max(abs(x), abs(y)):
                return False
        elif a != b:
            return False
    return True


@pytest.mark.parametrize("program, env, log, rtol", [
    pytest.param(*case[:-1], marks=[pytest.mark.full] if case[-1] == "full" else [], id=case[2]) for case in CASES])
def test_a_public_style_program_prints_what_it_printed_on_two_h200s(program, env, log, rtol, tmp_path) -> None:
    venv_bin = str(Path(sys.executable).parent)
    environment = child_env(**env, PATH=venv_bin + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run([str(Path(venv_bin) / "simgpu"), "run", "--gpus", "2", "--timeout", "600", *_launch(program)],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    problems = compare((REAL / f"{log}.log").read_text(), done.stdout + done.stderr, rtol)
    assert not problems, "\n".join(problems)


def test_the_comparison_catches_a_changed_number_and_ignores_wall_times() -> None:
    real = "iter 0: loss 4.8774, time 2476ms, mem 68.1 MiB\nsample [[0, 32, 0]]\n"
    assert compare(real, "iter 0: loss 4.8770, time 9ms, mem 69.0 MiB\nsample [[0, 32, 0]]\n", 2e-3) == []
    assert compare(real, "iter 0: loss 4.9774, time 9ms, mem 68.1 MiB\nsample [[0, 32, 0]]\n", 2e-3)
    assert compare(real, "iter 0: loss 4.8774, time 9ms, mem 90.0 MiB\nsample [[0, 32, 0]]\n", 2e-3)
    assert compare(real, "iter 0: loss 4.8774, time 9ms, mem 68.1 MiB\nsample [[0, 33, 0]]\n", 2e-3)
    assert compare(real, "iter 0: loss 4.8774, time 9ms, mem 68.1 MiB\n", 2e-3)

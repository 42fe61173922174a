"""Simulated GPUs draw CUDA's random numbers (docs/cuda-simulation.md, "Random numbers").

tests/sim_scripts/random_streams.py runs ~1000 random calls (factories, in-place distributions, dropout,
randperm, multinomial, nn.init, module init, explicit generators) under `simgpu run` and compares each with
what an H200 drew for the same call (tests/cuda_reference/random-streams-*.json.gz, recorded with
benchmarks/cuda_references/random_streams_device.sh): generator offsets and the exact distributions bit
for bit, the transforms through CUDA's fast log/exp/tan within a few units. Below: the arithmetic those
rest on, against exact references."""
from __future__ import annotations

import gzip
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from simgpu.cuda_sim import cuda_math, philox
from simgpu.cuda_sim import random_kernels as kernels
from tests.test_simgpu_run import SCRIPTS, simgpu_run

REFERENCE = sorted((Path(__file__).resolve().parent / "cuda_reference").glob("random-streams-*.json.gz"))[-1]


def test_random_ops_draw_what_an_h200_draws() -> None:
    done = simgpu_run(1, str(SCRIPTS / "random_streams.py"), "--reference", str(REFERENCE), timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "OK random_streams" in done.stdout


@pytest.mark.full
def test_random_ops_draw_what_an_h200_draws_at_every_recorded_size() -> None:
    """Up to 5M elements (several grid rounds of the 1056-block launch); the >2 GiB cases stay out."""
    done = simgpu_run(1, str(SCRIPTS / "random_streams.py"), "--reference", str(REFERENCE), "--sizes", "all",
                      timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "OK random_streams" in done.stdout


def test_philox_matches_the_random123_known_answers() -> None:
    """Philox4x32-10 of counter 0 and key 0 (Random123's kat_vectors), and the counter layout cuRAND uses:
    (offset / 4 + call) in the low 64 bits, the thread (subsequence) in the high 64."""
    x, y, z, w = philox.block(seed=0, offset=0, first=0, calls=1, threads=1)
    assert [int(v[0, 0]) for v in (x, y, z, w)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    later = philox.block(seed=7, offset=8, first=1, calls=1, threads=np.array([5], np.uint64))
    same = philox.block(seed=7, offset=12, first=0, calls=1, threads=6)
    assert [int(v[0, 0]) for v in later] == [int(v[0, 5]) for v in same]
    with pytest.raises(ValueError, match="multiple of 4"):
        philox.block(seed=0, offset=6, first=0, calls=1, threads=1)


class _Stream:
    """A CUDA generator's (seed, offset) bookkeeping, started where a recorded call started."""

    def __init__(self, seed: int, offset: int):
        self.seed, self.offset = seed, offset

    def philox_state(self, increment: int) -> tuple[int, int]:
        offset, self.offset = self.offset, self.offset + (increment + 3) // 4 * 4
        return self.seed, offset


@pytest.mark.parametrize("case,dtype,draw", [("huge/rand_float32", np.float32, philox.uniform4),
                                             ("huge/uniform_float64", np.float64, philox.uniform2_double)])
def test_launches_over_2_gib_split_in_halves_as_on_the_h200(case: str, dtype: type, draw: philox.Draw) -> None:
    """600M floats (300M doubles) exceed 32-bit indexing: CUDA takes an offset for the whole, then launches
    each half with its own. The plan's final offset and the recorded sampled elements (each computed from
    its own Philox counter here, without making the 2.4 GB tensor) are the H200's."""
    with gzip.open(REFERENCE, "rt") as f:
        recorded = json.load(f)["cases"][case]
    output = recorded["outputs"][0]
    stream = _Stream(*recorded["before"])
    plan = list(kernels.launches([output["numel"]], [1], np.dtype(dtype).itemsize, philox.PER_CALL[draw], stream))
    assert len(plan) == 2 and stream.offset == recorded["after"][1]
    for index, want in output["samples"].items():
        index = int(index)
        shape, _, start, seed, offset = next(p for p in plan if p[2] <= index < p[2] + p[0][0])
        threads = kernels.grid(shape[0]) * kernels.BLOCK
        local = index - start
        call, value = divmod(local // threads, philox.PER_CALL[draw])
        lanes = philox.block(seed, offset, call, 1, np.array([local % threads], np.uint64))
        got = draw(*lanes)[value, 0, 0]
        assert np.where(got == 1, 0, got).astype(dtype).tobytes().hex() == want, index  # (0, 1] -> [0, 1)


def _exact_round32(value: Fraction) -> np.float32:
    near = np.float32(float(value))
    candidates = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - value), int(c.view(np.uint32)) & 1))


def test_fma32_rounds_once_where_double_rounding_would_not() -> None:
    """a * b + 1 lands a hair above the midpoint between 1 and the next float: rounding the double sum
    (exactly that midpoint) to float would give 1; one rounding gives 1 + 2^-23."""
    u = 2.0**-23
    a, b = np.float32((1 + 2896 * u) * 2.0**-12), np.float32((1 - 2895 * u) * 2.0**-12)
    assert np.float32(float(a) * float(b) + 1.0) == np.float32(1)  # the trap
    assert cuda_math.fma32(np.array([a]), b, np.float32(1))[0] == np.float32(1 + u)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(3000) * np.exp2(rng.integers(-20, 20, 3000))).astype(np.float32)
    y = (rng.standard_normal(3000) * np.exp2(rng.integers(-20, 20, 3000))).astype(np.float32)
    z = (rng.standard_normal(3000) * np.exp2(rng.integers(-40, 40, 3000))).astype(np.float32)
    z[:1000] = -(x[:1000].astype(np.float64) * y[:1000]).astype(np.float32)  # cancellation
    got = cuda_math.fma32(x, y, z)
    want = [_exact_round32(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r))) for p, q, r in zip(x, y, z)]
    assert np.array_equal(got.view(np.uint32), np.array(want, np.float32).view(np.uint32))


def test_fma64_rounds_once() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(3000) * np.exp2(rng.integers(-30, 30, 3000))
    b = rng.standard_normal(3000) * np.exp2(rng.integers(-30, 30, 3000))
    c = rng.standard_normal(3000) * np.exp2(rng.integers(-60, 60, 3000))
    c[:1000] = -(a[:1000] * b[:1000])
    got = cuda_math.fma64(a, b, c)
    assert all(float(Fraction(p) * Fraction(q) + Fraction(r)) == g for p, q, r, g in zip(a, b, c, got))


def test_the_mufu_table_is_a_sine_of_the_cell() -> None:
    """The measured MUFU.SIN/COS: sin(0) = 0 and cos(0) = 1 exactly, within 2^-21 of the true values."""
    v = np.linspace(0, 6.28, 100_001).astype(np.float32)
    sin, cos = cuda_math.sincosf_fast(v)
    assert sin[0] == 0 and cos[0] == 1
    q = np.floor(v.astype(np.float64) * float(np.float32(0.15915494)) * 2**25)
    cells = np.where(q >= 2**24, q - q % 2, q) * 2.0**-25  # float32 holds only even cells above 1/2
    assert np.abs(sin - np.sin(2 * np.pi * cells)).max() < 2**-21
    assert np.abs(cos - np.cos(2 * np.pi * cells)).max() < 2**-21

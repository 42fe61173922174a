"""GPU leases (realgpu.leases) and the nccl session built on them, with fake GPU counts: no GPU needed.

Disjoint slices per xdist worker in the outer CUDA_VISIBLE_DEVICES order, skips that name how many
GPUs a test needed and the worker held, one-line errors without GPUs, NCCL's safe settings on every
rank, and CUDA never initialised in the controller.
"""
from __future__ import annotations

import os
from typing import Any

import pytest
import torch

import realgpu
from conformance import plugin
from conformance.spec import all_specs
from realgpu import NCCL_SAFE_ENV, GpuProbe
from realgpu.leases import Lease, lease_slice, require, shortfall, visible_ids, worker_lease, xdist_position
from simgpu.pool import RankPool


@pytest.fixture(autouse=True)
def cuda_untouchable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any CUDA call in this (controller) process fails the test."""
    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("CUDA touched in the controller process")

    for name in ("device_count", "is_available", "init", "set_device", "_lazy_init"):
        monkeypatch.setattr(torch.cuda, name, forbidden)


def fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int, why: str = "") -> None:
    monkeypatch.setattr(realgpu, "probe_gpus", lambda: GpuProbe(count, why))
    monkeypatch.setattr("realgpu.leases.probe_gpus", lambda: GpuProbe(count, why))


def xdist(monkeypatch: pytest.MonkeyPatch, worker: int | None, workers: int = 1, visible: str | None = None) -> None:
    for name, value in (("PYTEST_XDIST_WORKER", None if worker is None else f"gw{worker}"),
                        ("PYTEST_XDIST_WORKER_COUNT", None if worker is None else str(workers)),
                        ("CUDA_VISIBLE_DEVICES", visible)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


# ----------------------------------------------------------------------------- the pure parts
def test_slices_are_disjoint_cover_everything_and_keep_the_order() -> None:
    visible = ("3", "1", "7", "0", "5", "2", "6", "4")
    for workers in range(1, 11):
        slices = [lease_slice(visible, w, workers) for w in range(workers)]
        assert tuple(g for s in slices for g in s) == visible  # in order, nothing twice, nothing lost
        assert max(map(len, slices)) - min(map(len, slices)) <= 1


def test_uneven_division_gives_the_first_workers_one_more() -> None:
    gpus = tuple("01234")
    assert [lease_slice(gpus, w, 2) for w in range(2)] == [("0", "1", "2"), ("3", "4")]
    assert [lease_slice(gpus, w, 3) for w in range(3)] == [("0", "1"), ("2", "3"), ("4",)]


def test_more_workers_than_gpus_leaves_the_last_ones_without() -> None:
    assert [lease_slice(("0", "1"), w, 4) for w in range(4)] == [("0",), ("1",), (), ()]
    assert lease_slice((), 0, 1) == ()
    with pytest.raises(ValueError, match="worker index 4 is not in 0..3"):
        lease_slice(("0",), 4, 4)


def test_outer_cuda_visible_devices_keeps_its_order_and_subset() -> None:
    assert visible_ids("6,2,4", 3) == ("6", "2", "4")
    assert visible_ids(" 6, 2 ,4", 3) == ("6", "2", "4")
    assert visible_ids("GPU-aa11,GPU-bb22", 2) == ("GPU-aa11", "GPU-bb22")
    assert visible_ids("6,2,99", 2) == ("6", "2")  # CUDA stopped at an id it does not have
    assert visible_ids("", 0) == ()
    assert visible_ids(None, 3) == ("0", "1", "2")


def test_xdist_position() -> None:
    assert xdist_position({}) == (0, 1)
    assert xdist_position({"PYTEST_XDIST_WORKER": "gw11", "PYTEST_XDIST_WORKER_COUNT": "12"}) == (11, 12)
    with pytest.raises(ValueError, match="PYTEST_XDIST_WORKER='master'"):
        xdist_position({"PYTEST_XDIST_WORKER": "master", "PYTEST_XDIST_WORKER_COUNT": "2"})


# ----------------------------------------------------------------------------- leases from the environment
def test_worker_lease_under_xdist_with_an_outer_subset(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, 5)
    xdist(monkeypatch, 1, 2, visible="7,5,3,1,0")
    lease = worker_lease()
    assert lease.gpus == ("1", "0") and lease.visible == ("7", "5", "3", "1", "0") and lease.held == 2
    assert dict(lease.env()) == {"CUDA_VISIBLE_DEVICES": "1,0", **NCCL_SAFE_ENV}
    assert lease.describe() == "xdist worker 1 of 2 holds 2 GPUs (1,0) of 5 visible (7,5,3,1,0)"


def test_require_skips_naming_needed_and_held(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, 3)
    xdist(monkeypatch, 2, 3)
    assert require(1).gpus == ("2",)
    with pytest.raises(pytest.skip.Exception) as info:
        require(2)
    assert str(info.value) == "needs 2 GPUs; xdist worker 2 of 3 holds 1 GPU (2) of 3 visible (0,1,2)"
    xdist(monkeypatch, 3, 4)
    with pytest.raises(pytest.skip.Exception, match="needs 1 GPU; xdist worker 3 of 4 holds 0 GPUs of 3 visible"):
        require(1)


def test_require_without_gpus_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, 0, "torch 2.13.0+cpu is a CPU-only build")
    xdist(monkeypatch, None)
    with pytest.raises(pytest.skip.Exception) as info:
        require(2)
    assert str(info.value) == "needs 2 GPUs; this machine shows no GPU (torch 2.13.0+cpu is a CPU-only build)"
    assert shortfall(0, Lease((), ())) is None


def test_nccl_without_enough_gpus_is_one_usage_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, 1)
    with pytest.raises(pytest.UsageError) as info:
        realgpu.require_gpus(2)
    assert str(info.value) == "--backend=nccl needs at least 2 CUDA GPUs; this machine has 1"
    assert realgpu.visible_gpu_count() == 1


def test_the_real_probe_runs_in_a_child_and_explains_no_gpu() -> None:
    """On this CPU machine: 0 GPUs with a reason, counted without touching CUDA here (the fixture)."""
    realgpu._probe_cached.cache_clear()
    probe = realgpu.probe_gpus()
    if probe.count:
        pytest.skip(f"this machine has {probe.count} GPUs")
    assert probe.why_none and "\n" not in probe.why_none


# ----------------------------------------------------------------------------- the nccl session
class FakeConfig:
    """What ConformanceSession reads from pytest's config."""

    def __init__(self, **options: Any):
        self.options = {"--backend": "sim", "--backend-module": None, "--max-world-size": None,
                        "--conformance-profile": "ci", "--rank-timeout": 60.0, "--attach": None,
                        "--attach-world-size": None, "--attach-timeout": 300.0, **options}
        self.option = type("Option", (), {"numprocesses": options.get("numprocesses")})()

    def getoption(self, name: str, default: Any = None) -> Any:  # pytest.Config.getoption's signature
        return self.options.get(name, default)


def test_nccl_session_binds_ranks_to_the_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, 8)
    xdist(monkeypatch, 1, 2, visible="0,1,2,3,4,5,6,7")
    session = plugin.ConformanceSession(FakeConfig(**{"--backend": "nccl"}))
    assert session.max_world == 4  # min(--max-world-size 4, 4 leased)
    binding = session.binding()
    assert binding.device == "cuda" and dict(binding.env) == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", **NCCL_SAFE_ENV}
    assert session.pool(2).binding == binding and not session.pool(2).alive  # nothing started, no CUDA here
    xdist(monkeypatch, 0, 4)
    narrow = plugin.ConformanceSession(FakeConfig(**{"--backend": "nccl", "--max-world-size": 8}))
    assert narrow.max_world == 2 and dict(narrow.binding().env)["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_nccl_session_skips_collectives_the_lease_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, 3)
    xdist(monkeypatch, 2, 3)
    session = plugin.ConformanceSession(FakeConfig(**{"--backend": "nccl"}))
    specs = all_specs()
    assert session.world_sizes(specs["all_reduce"]) == [1]
    two = next(s for s in specs.values() if s.min_world == 2)
    with pytest.raises(pytest.skip.Exception, match="needs 2 GPUs; xdist worker 2 of 3 holds 1 GPU"):
        session.world_sizes(two)
    xdist(monkeypatch, 3, 4)
    idle = plugin.ConformanceSession(FakeConfig(**{"--backend": "nccl"}))
    with pytest.raises(pytest.skip.Exception, match="needs 1 GPU; xdist worker 3 of 4 holds 0 GPUs"):
        idle.world_sizes(specs["all_reduce"])


def test_cpu_sessions_draw_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpus(monkeypatch, 0)
    session = plugin.ConformanceSession(FakeConfig(**{"--max-world-size": 3}))
    assert session.lease is None and session.binding().env == () and session.binding().device == "cpu"
    assert session.world_sizes(all_specs()["all_reduce"]) == [1, 2, 3]


def test_attached_session_draws_the_one_world_and_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMGPU_ATTACH_KEY", "k")
    session = plugin.ConformanceSession(FakeConfig(**{"--backend": "nccl", "--attach": "127.0.0.1:0",
                                                      "--attach-world-size": 3}))
    try:
        assert session.world_sizes(all_specs()["all_reduce"]) == [3]
        binding = session.binding()
        assert binding.device == "cuda" and dict(binding.env) == NCCL_SAFE_ENV  # no local lease: GPUs are remote
        pool = session.pool(3)
        assert isinstance(pool, RankPool) and pool.source is session.attached
    finally:
        session.close()


@pytest.mark.parametrize("options,message", [
    ({"--attach-world-size": None}, "--attach needs --attach-world-size"),
    ({"numprocesses": 2}, "cannot be combined with pytest-xdist"),
    ({"--attach": "nowhere"}, "--attach: expected HOST:PORT, got 'nowhere'"),
])
def test_attach_option_errors_are_one_line(monkeypatch: pytest.MonkeyPatch, options: dict, message: str) -> None:
    monkeypatch.setenv("SIMGPU_ATTACH_KEY", "k")
    config = FakeConfig(**{"--attach": "127.0.0.1:0", "--attach-world-size": 2, **options})
    with pytest.raises(pytest.UsageError) as info:
        plugin.ConformanceSession(config)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_attach_without_a_key_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SIMGPU_ATTACH_KEY", raising=False)
    with pytest.raises(pytest.UsageError, match="--attach: set SIMGPU_ATTACH_KEY"):
        plugin.ConformanceSession(FakeConfig(**{"--attach": "127.0.0.1:0", "--attach-world-size": 2}))


def probe_env(ctx: Any) -> dict[str, str | None]:
    """Runs on a rank: the settings the pool's binding gave it."""
    return {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", *NCCL_SAFE_ENV)}


def test_every_rank_gets_the_lease_and_nccl_safe_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The nccl binding's env reaches each rank process (shown on gloo ranks: the mechanism is the same)."""
    fake_gpus(monkeypatch, 4)
    xdist(monkeypatch, 1, 2)
    lease = worker_lease()
    import dataclasses

    from simgpu.pool import Binding

    with RankPool(2, dataclasses.replace(Binding("gloo"), env=lease.env()), timeout=30) as pool:
        values = [o.value for o in pool.run(probe_env)]
    assert values == [{"CUDA_VISIBLE_DEVICES": "2,3", **NCCL_SAFE_ENV}] * 2

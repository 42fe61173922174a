"""benchmarks/torch_suite/upstream.py's own rules (issue 27): what a simulated run hides from the CUDA
driver, and how --budget cuts units. No PyTorch checkout and no simulation needed."""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def upstream():
    spec = importlib.util.spec_from_file_location("torch_suite_upstream", ROOT / "benchmarks/torch_suite/upstream.py")
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def test_a_simulated_run_hides_the_real_gpus_and_names_the_simulated_ones(upstream) -> None:
    assert upstream.simulated_visibility(4, {}) == {"CUDA_VISIBLE_DEVICES": "", "SIMGPU_VISIBLE_DEVICES": "0,1,2,3"}
    # the caller's own selection is kept, for the simulated GPUs
    assert upstream.simulated_visibility(4, {"CUDA_VISIBLE_DEVICES": "2,0"})["SIMGPU_VISIBLE_DEVICES"] == "2,0"
    assert upstream.simulated_visibility(4, {"SIMGPU_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": ""}) == {
        "CUDA_VISIBLE_DEVICES": "", "SIMGPU_VISIBLE_DEVICES": "1"}


def test_the_environment_of_a_real_run_keeps_the_gpus(upstream, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    args = argparse.Namespace(real=True, gpus=4, test_timeout=None, cpp_stacktraces=False)
    env = upstream.environment(args, "marker")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and "SIMGPU_VISIBLE_DEVICES" not in env
    env = upstream.environment(argparse.Namespace(**{**vars(args), "real": False}), "marker")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["SIMGPU_VISIBLE_DEVICES"] == "0,1,2,3"


def test_budget_cuts_each_unit_and_starts_none_it_cannot_finish(upstream, tmp_path: Path) -> None:
    args = argparse.Namespace(timeout=1800.0)
    assert upstream.unit_limit(args, None) == 1800.0
    now = time.monotonic()
    limit = upstream.unit_limit(args, now + 400)
    assert 400 - upstream.STOP_GRACE_S - 5 < limit <= 400 - upstream.STOP_GRACE_S
    unit = {"family": "dtensor", "file": "test/x.py", "name": "x.0", "args": ["test/x.py::C::test_a", "test/x.py::C::test_b"]}
    done = upstream.run_unit(unit, args, tmp_path, "marker", tmp_path, deadline=now + upstream.STOP_GRACE_S + 1)
    assert done["not_run"] == "budget spent"
    assert done["tests"] == unit["args"] and done["results"] == {}
    assert not list(tmp_path.iterdir())  # nothing was started


def test_tests_on_one_fixed_port_share_a_unit_of_their_own(upstream, tmp_path: Path, monkeypatch) -> None:
    rel = "test/distributed/test_device_mesh.py"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text("")
    same_port = [f"{rel}::DeviceMeshSetDeviceTest::test_manual_set_device",
                 f"{rel}::DeviceMeshTest::test_init_process_group"]
    others = [f"{rel}::DeviceMeshTest::test_{n}" for n in ("a", "b", "init_process_group_x")]
    monkeypatch.setattr(upstream, "collect", lambda *a: (others[:1] + same_port + others[1:], ""))
    args = argparse.Namespace(families=["device_mesh"], files=None, chunk=2, reference=None, only=None, jobs=1, k=None)
    units, missing = upstream.units_for(args, tmp_path, "marker", tmp_path, {})
    assert not missing
    assert [u["args"] for u in units if u["name"].endswith("same_port")] == [same_port]
    assert sorted(i for u in units if not u["name"].endswith("same_port") for i in u["args"]) == sorted(others)

"""The function mode's cached per-function kinds and the cheaper reads of a tensor's GPU
(tests/sim_scripts/call_paths.py, run by `simgpu run` in a fresh process): the same decisions as the full rules."""
from __future__ import annotations

from tests.test_simgpu_run import SCRIPTS, simgpu_run


def test_call_paths() -> None:
    done = simgpu_run(2, str(SCRIPTS / "call_paths.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK call_paths" in done.stdout

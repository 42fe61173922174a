"""Simulated streams keep their own clocks (simgpu/cuda_sim/stream_clocks.py): `torch.cuda._sleep` on two
streams overlaps, waits order the clocks, synchronize waits, and programs without `_sleep` time the host
as before. The program runs under `simgpu run` in a fresh process."""
from __future__ import annotations

from tests.test_simgpu_run import SCRIPTS, simgpu_run


def test_stream_clocks_on_simulated_gpus() -> None:
    done = simgpu_run(2, str(SCRIPTS / "stream_clocks.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK stream_clocks" in done.stdout

"""Simulated streams keep their own clocks (simgpu/cuda_sim/stream_clocks.py): `torch.cuda._sleep` on two
streams overlaps, waits order the clocks, synchronize waits, and programs without `_sleep` time the host
as before. The program runs under `simgpu run` in a fresh process."""
from __future__ import annotations

from tests.test_simgpu_run import SCRIPTS, simgpu_run


def test_stream_clocks_on_simulated_gpus() -> None:
    done = simgpu_run(2, str(SCRIPTS / "stream_clocks.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK stream_clocks" in done.stdout


def test_collectives_order_stream_clocks() -> None:
    """A collective issued on a stream after a 100 ms `_sleep` ends after it: an event recorded after it on that
    stream (`sync_on_side`) and one on the default stream after `work.wait()` (`work_wait`, as NCCL's wait
    makes the current stream wait) span the sleep; without the hook in backend.SimWork the second was 3-8 ms.
    The sleep is calibrated by get_cycles_per_ms on this host (5-11% short): more than half of it is the bound."""
    import json
    import sys

    done = simgpu_run(2, sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                      str(SCRIPTS.parent.parent / "benchmarks" / "torch_suite" / "stream_clock_probe.py"), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    ranks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(ranks) == 2, done.stdout
    for rank in ranks:
        assert rank["sync_on_side"] > rank["sleep_ms"] / 2, rank
        assert rank["work_wait"] > rank["sleep_ms"] / 2, rank

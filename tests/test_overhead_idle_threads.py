"""No thread simgpu adds to a rank wakes while the program computes on its own (issue 29's step overhead).

A thread that polls (a store wait with a short timeout, a loop over is_completed, a listener's timed
accept) costs CPU on every rank all the time, more the more ranks share the cores. Counted in context
switches, not CPU time, so a loaded machine cannot fail it. gloo's own threads are left out: its event
loop wakes every 10 ms on plain CPU processes too (tests/sim_scripts/idle_wakeups.py with
IDLE_WAKEUPS_PLAIN=1 shows the same 100 a second), one per group in both."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.processes import run_bounded

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "sim_scripts" / "idle_wakeups.py"
GLOO_THREADS = ("gloo_tcp_loop", "pt_gloo_runloop")
MOST = 3  # wakeups of one thread in the 1.5 s window: a 100 ms poll would make 15


def test_simgpus_threads_sleep_while_the_program_computes() -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    done = run_bounded([sys.executable, "-m", "simgpu", "run", "--gpus", "2", *torchrun, str(SCRIPT)], 240,
                       cwd=ROOT, env={**os.environ, "IDLE_WAKEUPS_GROUPS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    wakeups = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])["wakeups"]
    ours = {name: n for name, n in wakeups.items()
            if not name.startswith(("MainThread/", *GLOO_THREADS))}
    assert sum(name.startswith("simgpu-issue-") for name in ours) == 2, wakeups  # both groups' issuers were seen
    assert all(n <= MOST for n in ours.values()), ours

"""Gaps that public-style programs found on simulated GPUs (r31), each checked as CUDA has it
(tests/sim_scripts/public_programs_meet.py; docs/simulated-device-suite.md)."""
from __future__ import annotations

from tests.test_simgpu_run import SCRIPTS, simgpu_run


def test_what_public_programs_meet() -> None:
    done = simgpu_run(1, str(SCRIPTS / "public_programs_meet.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK public_programs_meet" in done.stdout

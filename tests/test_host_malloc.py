"""`simgpu run`'s malloc settings (simgpu.host_malloc): what it sets, what it leaves to the user, and
that a simulated GPU tensor's freed memory is then reused without faulting its pages in again."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from simgpu import host_malloc
from tests.processes import run_bounded

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "sim_scripts" / "host_malloc_reuse.py"
MIB = 2**20


ON = {host_malloc.ENV: "1"}


def test_all_three_are_set_on_glibc_by_default_and_none_elsewhere() -> None:
    assert host_malloc.defaults({}, libc="glibc") == host_malloc.defaults(ON, libc="glibc")  # on unless turned off
    assert host_malloc.defaults(ON, libc="glibc") == {"MALLOC_MMAP_THRESHOLD_": str(32 * MIB),
                                                       "MALLOC_TRIM_THRESHOLD_": str(64 * MIB),
                                                       "MALLOC_TOP_PAD_": str(32 * MIB)}
    assert host_malloc.defaults(ON, libc="") == {}  # musl, macOS: these variables mean nothing there
    assert host_malloc.defaults({}, libc="") == {}


def test_what_the_user_sets_wins_by_variable_or_tunable() -> None:
    env = {**ON, "MALLOC_TRIM_THRESHOLD_": "0", "GLIBC_TUNABLES": "glibc.malloc.top_pad=4096:glibc.malloc.check=3"}
    assert host_malloc.defaults(env, libc="glibc") == {"MALLOC_MMAP_THRESHOLD_": str(32 * MIB)}


def test_the_switch_turns_them_off_and_a_bad_value_is_one_line() -> None:
    assert host_malloc.defaults({host_malloc.ENV: "0"}, libc="glibc") == {}
    assert host_malloc.defaults({host_malloc.ENV: "1"}, libc="glibc") != {}
    with pytest.raises(ValueError, match="SIMGPU_MALLOC_DEFAULTS must be 0 .* or 1 .*got 'yes'"):
        host_malloc.defaults({host_malloc.ENV: "yes"}, libc="glibc")


def _run(env: dict[str, str]) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != host_malloc.ENV}
    done = run_bounded([sys.executable, "-m", "simgpu", "run", "--gpus", "1", sys.executable, str(SCRIPT)], 180,
                       cwd=ROOT, env={**base, **env})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "without the warm template" not in done.stderr  # the template serves the program all the same
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.skipif(host_malloc.defaults(ON) == {}, reason="the C library here is not glibc")
def test_a_run_gets_them_unasked_and_reuses_freed_memory_without_refaulting_it() -> None:
    got = _run({})
    assert got["env"] == host_malloc.defaults(ON)
    # 48 MiB is 12,288 pages: glibc's own thresholds give them back and the next round faults them
    # in again (12,256 on either thread, measured with SIMGPU_MALLOC_DEFAULTS=0); kept, none.
    assert got["main"] < 256 and got["thread"] < 256, got


def test_switched_off_a_run_gets_glibcs_own_behaviour() -> None:
    got = _run({host_malloc.ENV: "0"})
    assert got["env"] == {}
    if host_malloc.defaults(ON) != {}:  # glibc: the freed 48 MiB go back to the system and fault in again
        assert got["main"] > 4096 or got["thread"] > 4096, got


def test_the_users_own_settings_reach_the_program_unchanged() -> None:
    got = _run({"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert got["env"]["MALLOC_TRIM_THRESHOLD_"] == "131072"  # the user's value, not simgpu's
    assert got["env"] == {**host_malloc.defaults(ON), "MALLOC_TRIM_THRESHOLD_": "131072"}

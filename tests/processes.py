"""What the tests share about processes: is a pid still alive, are these pids all gone, the environment
and the time bound of a child process, and a result computed once per run whichever xdist worker asks."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parent.parent


def running(pid: int) -> bool:
    """True while `pid` is a live process (a zombie or a vanished pid counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def all_gone(pids: list[int], within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(running(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(running(p) for p in pids)


def run_bounded(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:  # noqa: ANN003
    """subprocess.run(cmd, capture_output=True, text=True): past `timeout` the test fails with what the
    command had printed (the end of its stdout and stderr), not only with the command line."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as expired:
        def text(out: str | bytes | None) -> str:
            return out.decode(errors="replace") if isinstance(out, bytes) else out or ""
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout:g} s\n"
                             f"--- stdout (end) ---\n{text(expired.stdout)[-3000:]}\n"
                             f"--- stderr (end) ---\n{text(expired.stderr)[-6000:]}") from None


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child process that runs this repository's code as a user would: the repository
    first on PYTHONPATH, and nothing of the surrounding test run (its CI profile, pytest options, xdist
    worker name) leaking into it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "SIMGPU_PROFILE", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def run_once(tmp_path_factory: pytest.TempPathFactory, name: str, produce: Callable[[Path], Any]) -> Any:
    """produce(directory) once per test run, by whichever xdist worker asks first; the others wait for it and
    read what it returned (JSON). A module fixture alone would run it again in every worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the workers of one run
    result = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not result.exists():
            workdir = root / name
            workdir.mkdir(exist_ok=True)
            result.write_text(json.dumps(produce(workdir)))
        return json.loads(result.read_text())

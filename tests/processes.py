"""Process checks shared by the tests: is a pid still a live process, are these pids all gone."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


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

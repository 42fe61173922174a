"""Nothing a `simgpu run` program starts outlives the run: find every such process and kill it.

A program's processes are found two ways, because either alone misses some:
- descendants of the launcher: on Linux the launcher is a child subreaper (PR_SET_CHILD_SUBREAPER),
  so a process that calls setsid or double-forks is re-parented to it, not to init;
- a run marker, SIMGPU_RUN_ID=<random>, in the program's environment: every process the program
  starts inherits it, so /proc/*/environ finds them even after the launcher itself is gone.

The watchdog (`python -m simgpu.reaper --watch RUN_ID`, started by the launcher in its own session)
holds the read end of a pipe whose write end only the launcher has; when the pipe closes (the launcher
exited, or was SIGKILLed) it kills every process carrying the marker, then exits. A process that
clears its environment and escapes to init is the one thing neither way sees.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Callable

from simgpu.pool import descendants, is_zombie

RUN_ID_ENV = "SIMGPU_RUN_ID"
_PR_SET_CHILD_SUBREAPER = 36
KILL_BOUND_S = 10.0  # how long kill_all keeps finding and killing before it names what is left


def new_run_id() -> str:
    return secrets.token_hex(8)


def become_subreaper() -> bool:
    """Orphaned descendants (setsid, double fork) are re-parented to this process (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def marked(run_id: str) -> list[int]:
    """Processes (of this user) whose environment carries SIMGPU_RUN_ID=run_id."""
    return with_env(RUN_ID_ENV, run_id)


def with_env(name: str, value: str) -> list[int]:
    """Processes (of this user, this one excepted) whose environment carries name=value."""
    needle = f"{name}={value}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _zombie(pid: int) -> bool:
    """Gone, or exited and awaiting its parent's wait()."""
    return not os.path.exists(f"/proc/{pid}") or is_zombie(pid)


def _reap() -> None:
    """Collect exited children (orphans re-parented to a subreaper become our children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_all(run_id: str, exclude: set[int] = frozenset(), bound_s: float = KILL_BOUND_S) -> list[int]:
    """SIGKILL every descendant of this process and every process marked with run_id, until none is left
    (a dying process may start another). Returns the pids still alive after bound_s (normally none)."""
    return _kill_until_none(lambda: set(descendants(os.getpid())) | set(marked(run_id)), exclude, bound_s)


def kill_marked(run_id: str, bound_s: float = KILL_BOUND_S) -> list[int]:
    """SIGKILL every process marked with run_id (and only those: the caller's other children live on),
    until none is left; the pids still alive after bound_s. The `ranks` fixture's pools mark their ranks,
    so what a rank started in a new session or by a double fork is found at the end of the session."""
    return _kill_until_none(lambda: set(marked(run_id)), set(), bound_s)


def _kill_until_none(find: Callable[[], set[int]], exclude: set[int], bound_s: float) -> list[int]:
    deadline = time.monotonic() + bound_s
    while True:
        pids = find() - set(exclude) - {os.getpid()}
        live = [p for p in pids if not _zombie(p)]
        _reap()
        if not live:
            return []
        if time.monotonic() > deadline:
            return sorted(live)
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


class Watchdog:
    """A small process that kills the run's processes when this one goes away, however it goes."""

    def __init__(self, run_id: str):
        env = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV}
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = f"import sys; sys.path.insert(0, {here!r}); from simgpu.reaper import main; sys.exit(main())"
        self.proc = subprocess.Popen([sys.executable, "-c", code, "--watch", run_id],
                                     stdin=subprocess.PIPE, env=env, start_new_session=True,
                                     close_fds=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """Close the pipe: the watchdog sweeps once more (normally nothing is left) and exits."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=KILL_BOUND_S + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _watch(run_id: str) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's; the pipe closing is ours
    while os.read(0, 4096):
        pass
    left = kill_all(run_id)
    if left:
        print(f"simgpu run: watchdog could not kill processes {left} of run {run_id}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simgpu.reaper")
    parser.add_argument("--watch", required=True, metavar="RUN_ID",
                        help="wait for stdin to close, then kill every process marked with RUN_ID")
    return _watch(parser.parse_args(argv).watch)


if __name__ == "__main__":
    sys.exit(main())

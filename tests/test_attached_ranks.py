"""Ranks started by torchrun serve the controller's RankPool (simgpu.attach), on this one box.

Two torchrun "nodes" (--nnodes 2, --node-rank 0 and 1, rendezvous on 127.0.0.1) start one rank
each; the ranks connect back to an AttachedRanks listener on a kernel-assigned port. The pool runs
collectives on them, survives a rank's crash (torchrun restarts the group), closes, and afterwards
no torchrun agent or rank is left. Every wait is bounded; whatever is left is killed at the end.
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simgpu.attach import AttachedRanks, AttachError, attach_key, parse_address
from simgpu.pool import Binding, RankPool, RankPoolError
from tests import rank_fns
from tests.processes import all_gone, running

REPO = Path(__file__).resolve().parent.parent
KEY = secrets.token_hex(8)


def _free_port() -> int:
    """For torchrun's static rendezvous (it needs a port number up front); released before torchrun binds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TORCHELASTIC_"))}
    env.update(SIMGPU_ATTACH_KEY=KEY, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    return env


def _descendants(pid: int) -> set[int]:
    """Every live descendant of pid (from /proc), to check later that none outlived the run."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


class TorchrunNodes:
    """`torchrun --nnodes 2` started twice on this box, as two nodes would run it."""

    def __init__(self, controller_port: int, log_dir: Path, max_restarts: int = 1):
        master = _free_port()
        self.logs = [log_dir / f"node{n}.log" for n in (0, 1)]
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(n),
                 "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(master),
                 "--max-restarts", str(max_restarts), "--monitor-interval", "0.1",
                 "-m", "simgpu.attach", "--controller", f"127.0.0.1:{controller_port}", "--connect-timeout", "60"],
                cwd=REPO, env=_env(), stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
            for n, log in enumerate(self.logs)
        ]
        self.seen: set[int] = set()

    def remember(self) -> None:
        """Note every process torchrun has started so far (agents' workers run in their own sessions)."""
        for p in self.procs:
            self.seen |= {p.pid} | _descendants(p.pid)

    def wait(self, timeout: float) -> list[int | None]:
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        return [p.returncode for p in self.procs]

    def kill(self) -> None:
        self.remember()
        for pid in self.seen:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for p in self.procs:
            p.wait(10)

    def tail(self) -> str:
        return "\n".join(f"--- {log.name} ---\n" + "\n".join(log.read_text().splitlines()[-15:]) for log in self.logs)


def test_torchrun_ranks_serve_the_pool_and_nothing_is_left(tmp_path: Path) -> None:
    source = AttachedRanks("127.0.0.1:0", key=KEY.encode(), connect_timeout=60)
    nodes = TorchrunNodes(source.port, tmp_path)
    pool = RankPool(2, Binding("gloo", init_timeout=60), timeout=20, straggler_grace=1.0, source=source)
    try:
        first = pool.run(rank_fns.whoami)
        assert [o.value["rank"] for o in first] == [0, 1] and all(o.value["world"] == 2 for o in first), nodes.tail()
        old = [o.value["pid"] for o in first]
        assert pool.pids() == old and os.getpid() not in old
        nodes.remember()
        assert set(old) <= nodes.seen  # the ranks are torchrun's workers, not forked here
        assert [o.value for o in pool.run(rank_fns.gloo_sum, 5)] == [[11, 2], [11, 2]]
        assert pool.run(rank_fns.raise_on, 1, "rank one says no")[1].error == "rank one says no"

        with pytest.raises(RankPoolError) as info:  # a rank dies: the pool drops both, torchrun restarts them
            pool.run(rank_fns.exit_on, 1, 7)
        assert info.value.kind == "crash" and info.value.cause_ranks == [1]
        assert "rank 1 hung up" in str(info.value)
        again = pool.run(rank_fns.whoami)
        new = [o.value["pid"] for o in again]
        assert [o.value["calls"] for o in again] == [1, 1] and not set(new) & set(old), nodes.tail()
        assert pool.run(rank_fns.gloo_sum, 1)[0].value == [3, 2] and pool.starts == 2
        nodes.remember()

        pool.close()  # a polite close ends the ranks with exit 0: torchrun finishes cleanly
        assert nodes.wait(30) == [0, 0], nodes.tail()
        assert all_gone(sorted(nodes.seen), within=10.0), [p for p in nodes.seen if running(p)]
    finally:
        pool.close(force=True)
        source.close()
        nodes.kill()


def test_a_rank_without_the_key_is_refused_and_missing_ranks_are_named(tmp_path: Path) -> None:
    source = AttachedRanks("127.0.0.1:0", key=b"right key", connect_timeout=1.5)
    env = {**_env(), "SIMGPU_ATTACH_KEY": "wrong key", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    try:
        stranger = subprocess.run([sys.executable, "-m", "simgpu.attach", "--controller", f"127.0.0.1:{source.port}"],
                                  cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert stranger.returncode == 2 and "refused SIMGPU_ATTACH_KEY" in stranger.stderr, stranger.stderr
        pool = RankPool(1, Binding("gloo"), source=source)
        with pytest.raises(RankPoolError) as info:
            pool.start()
        assert info.value.kind == "start failure" and "ranks [0] of 1 did not connect" in str(info.value)
        began = time.monotonic()
        with pytest.raises(RankPoolError):  # given up once: later starts fail at once, not after another wait
            pool.start()
        assert time.monotonic() - began < 1.0
    finally:
        source.close()


def test_attach_outside_torchrun_says_what_is_missing() -> None:
    env = {k: v for k, v in _env().items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                       "MASTER_PORT")}
    out = subprocess.run([sys.executable, "-m", "simgpu.attach", "--controller", "127.0.0.1:9"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "RANK" in out.stderr and "torchrun" in out.stderr


def test_attach_address_and_key_errors_are_one_line() -> None:
    assert parse_address("node0:29400") == ("node0", 29400) and parse_address("[::1]:5") == ("::1", 5)
    for bad in ("node0", "node0:http", ":80", "h:70000"):
        with pytest.raises(AttachError, match="HOST:PORT"):
            parse_address(bad)
    with pytest.raises(AttachError, match="SIMGPU_ATTACH_KEY"):
        attach_key({})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(AttachError, match="cannot listen on 127.0.0.1:"):
            AttachedRanks(f"127.0.0.1:{taken.getsockname()[1]}", key=b"k")

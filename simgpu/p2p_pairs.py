"""NCCL's first point-to-point call between two ranks: a rendezvous, and the deadlock it can make.

ProcessGroupNCCL (torch 2.11, NCCL 2.28.9) gives each pair of ranks its own communicator, created
at the pair's first send/recv and blocking until both ranks have reached their first call with each
other. A ring where every rank first calls `isend(next)` and then `irecv(prev)` therefore deadlocks
at 3+ ranks: each rank waits for its next rank, which waits for its own next (seen on 4x H200,
conformance/results/h200-2026-11-22-full/). Ops inside `batch_isend_irecv` are one NCCL group on the
group's communicator and create no pair communicator.

Here each rank announces its first call with a peer in the group's store and waits for the peer's;
while it waits it follows the "waits for" chain of the ranks it waits on. A chain that comes back to
this rank, unchanged over two readings, is the deadlock NCCL would hang in: every rank of the cycle
raises P2PDeadlock naming the cycle. A peer that never makes its first call gives P2PTimeout after
the strict deadline (simgpu.strict: SIMGPU_STRICT_TIMEOUT, 30 s). SIMGPU_STRICT=0 turns this off too.
"""
from __future__ import annotations

import sys
import time
from typing import Any

import torch.distributed as dist

from simgpu import strict

_PREFIX = "simgpu/p2p"
_CONFIRM_S = 0.1  # a cycle must read the same twice this far apart (a rank may be between two waits)


class P2PDeadlock(RuntimeError):
    """First point-to-point calls that wait for each other in a cycle (NCCL hangs there)."""

    poisons_process_group = True


class P2PTimeout(RuntimeError):
    """A peer did not make its first point-to-point call with this rank before the strict deadline."""

    poisons_process_group = True


def inside_batch() -> bool:
    """Whether the current send/recv was issued by dist.batch_isend_irecv (one NCCL group: no pair rendezvous)."""
    batch = dist.distributed_c10d.batch_isend_irecv.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is batch:
            return True
        frame = frame.f_back
    return False


class PairRendezvous:
    """Per group and rank: the peers whose pair communicator exists, and the first-call rendezvous."""

    def __init__(self, store: dist.Store, rank: int, label: Any = lambda: "the process group"):
        self.store = store
        self.rank = rank
        self._label = label
        self._ready: set[int] = set()

    def first_contact(self, peer: int, op: str) -> None:
        """Block until `peer` has made its first send/recv with this rank (once per pair)."""
        if peer in self._ready or peer == self.rank or not strict.enabled() or inside_batch():
            return
        site = strict.call_site()
        self.store.set(self._arrived(self.rank, peer), "1")
        self.store.set(self._waiting(self.rank), f"{peer}|{op}|{site}")
        deadline = time.monotonic() + strict.get_timeout()
        pause = 0.001
        while not self.store.check([self._arrived(peer, self.rank)]):
            cycle = self._cycle()
            if cycle:
                time.sleep(_CONFIRM_S)
                if self._cycle() == cycle:  # this rank's waiting entry stays: the others see the cycle too
                    raise P2PDeadlock(self._deadlock_message(cycle))
            if time.monotonic() > deadline:
                raise P2PTimeout(
                    f"rank {self.rank}: its first {op} with rank {peer} ({site}) waited "
                    f"{strict.get_timeout():.0f}s for rank {peer}'s first send/recv with rank {self.rank} in "
                    f"{self._label()}; on NCCL this hangs while creating the pair's communicator")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        self.store.set(self._waiting(self.rank), "")
        self._ready.add(peer)

    def _arrived(self, who: int, peer: int) -> str:
        return f"{_PREFIX}/arrived/{who}/{peer}"

    def _waiting(self, who: int) -> str:
        return f"{_PREFIX}/waiting/{who}"

    def _waits_for(self, who: int) -> tuple[int, str, str] | None:
        """(peer, op, call site) that `who` is blocked on, or None."""
        key = self._waiting(who)
        if not self.store.check([key]):
            return None
        text = self.store.get(key).decode()
        if not text:
            return None
        peer, op, site = text.split("|", 2)
        peer_i = int(peer)
        if self.store.check([self._arrived(peer_i, who)]):
            return None  # the peer has arrived: `who` is about to go on
        return peer_i, op, site

    def _cycle(self) -> list[tuple[int, int, str, str]] | None:
        """The chain of blocked ranks starting here, if it comes back here: (rank, peer, op, site) each."""
        chain: list[tuple[int, int, str, str]] = []
        who = self.rank
        seen = set()
        while who not in seen:
            seen.add(who)
            edge = self._waits_for(who)
            if edge is None:
                return None
            chain.append((who, *edge))
            who = edge[0]
        return chain if who == self.rank else None

    def _deadlock_message(self, cycle: list[tuple[int, int, str, str]]) -> str:
        steps = "; ".join(f"rank {r} {op}({'dst' if op == 'send' else 'src'}={p}) at {site} waits for rank {p}"
                          for r, p, op, site in cycle)
        return (f"first point-to-point calls in {self._label()} deadlock on NCCL: {steps}. ProcessGroupNCCL "
                "creates a communicator for each pair at the pair's first send/recv and blocks until both "
                "ranks have arrived, so every rank here waits for a rank that waits in turn. Make the first "
                "calls meet (e.g. even ranks send first, odd ranks receive first) or issue them together "
                "with dist.batch_isend_irecv. (simgpu: detected on rank "
                f"{self.rank})")

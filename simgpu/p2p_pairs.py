"""NCCL's first point-to-point call between two ranks: a rendezvous, and the deadlock it can make.

ProcessGroupNCCL (torch 2.11, NCCL 2.28.9) gives each pair of ranks its own communicator, created
at the pair's first send/recv and blocking the calling thread until both ranks have reached their
first call with each other. A ring where every rank first calls `isend(next)` and then `irecv(prev)`
therefore deadlocks at 3+ ranks: each rank waits for its next rank, which waits for its own next
(seen on 4x H200, conformance/results/h200-2026-11-22-full/). Ops inside `batch_isend_irecv` (or any
coalescing block) are one NCCL group on the group's communicator and create no pair communicator.

The model. A rank's first call with a peer posts "arrived" for the pair, and, unless an earlier first
call of its own is still unanswered, "this rank is blocked on that peer": on NCCL a rank is blocked
on its earliest unanswered first call, and nothing after it runs. The rank then waits a short
while (WINDOW_S) for the peer, following the chain of blocked ranks: a chain that comes back to this
rank, unchanged over two readings, is the cycle NCCL would hang in, and P2PDeadlock is raised naming
it. If the peer has not come by the end of the window the rank goes on: the simulator's collectives
block the host where NCCL's do not (a peer may be waiting in a collective for this very rank), so a
longer wait here could invent hangs that NCCL does not have. The "blocked on" entry stays until the
peer arrives, so ranks that come later still see the cycle. Keys are scoped to one creation of the
group (a store counter), so a re-created group with the same store starts clean. SIMGPU_STRICT=0
turns the model off with the strict check.

The same chain-following reports sends that wait for each other (`await_recv`): a rank waiting on a
send whose recv is not posted is blocked on that peer, so two ranks that both `send` before they
`recv` (their pair communicator already made) form a 2-rank cycle, reported as P2PDeadlock as the
3-rank ring is, at every message size (NCCL's recorded behaviour: EAGER_SEND_BYTES).
"""
from __future__ import annotations

import inspect
import sys
import threading
import time
from typing import Any, Callable

import torch.distributed as dist

from simgpu import strict

_PREFIX = "simgpu/p2p"
# Whether NCCL completes a small send without its recv, as a recorded finding: on 2x H200 (NCCL 2.28.9,
# conformance/results/nccl-send-first-2026-11-26 on main) no size completed (4 B and 4 KiB hung, 1 MiB and
# up aborted), so every send here waits for its recv and a send-first cycle is a deadlock at any size.
# A later finding that some size does complete sets the bound: sends of at most that many bytes then
# complete at once (their data copied) and never form a cycle.
EAGER_SEND_BYTES: int | None = None
_BLOCKED_GRACE_S = 0.02  # a send waited for this long without its recv posted marks its rank blocked
WINDOW_S = 2.0    # how long a first call waits for its peer before the rank goes on (capped by the strict deadline)
_CONFIRM_S = 0.1  # a cycle must read the same twice this far apart (a rank may be between two calls)
_BATCH_CODE = None


class P2PDeadlock(RuntimeError):
    """First point-to-point calls that wait for each other in a cycle (NCCL hangs there)."""

    poisons_process_group = True


def _inside_batch_isend_irecv() -> bool:
    """Whether the current send/recv comes from dist.batch_isend_irecv (its own code, under any wrapper)."""
    global _BATCH_CODE
    if _BATCH_CODE is None:
        _BATCH_CODE = inspect.unwrap(dist.distributed_c10d.batch_isend_irecv).__code__
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is _BATCH_CODE:
            return True
        frame = frame.f_back
    return False


class PairRendezvous:
    """Per group and rank: which pairs have their communicator, and the first-call rendezvous."""

    def __init__(self, store: dist.Store, rank: int, label: Callable[[], str] = lambda: "the process group",
                 global_rank: Callable[[int], int] = lambda r: r, signer: Any = None):
        """signer: the group's strict.StrictChecker, whose secret signs the "blocked on" records (an
        outsider who reaches the store cannot make a false P2PDeadlock)."""
        self.store = store
        self._signer = signer
        self.rank = rank
        self._label = label
        self._global = global_rank
        self._generation: int | None = None
        self._ready: set[int] = set()
        self._local = threading.local()  # .coalescing: inside _start_coalescing/_end_coalescing

    def coalescing(self, on: bool) -> None:
        """ProcessGroup._start_coalescing / _end_coalescing: the ops in between are one NCCL group."""
        self._local.coalescing = on

    def first_contact(self, peer: int, op: str) -> None:
        """A send/recv with `peer` (a group rank): the pair's rendezvous if it is the first (see module doc)."""
        if peer in self._ready or peer == self.rank or not strict.enabled():
            return
        if getattr(self._local, "coalescing", False) or _inside_batch_isend_irecv():
            return
        if self._arrived_from(peer):
            self._ready.add(peer)
            self._mark_arrived(peer)
            self._unblock_if_on(peer)
            return
        self._mark_arrived(peer)
        if self._blocked_on() is None:
            key = self._waiting(self.rank)
            text = f"{peer}|{op}|{strict.call_site()}"
            self.store.set(key, self._signer.seal(key, text) if self._signer is not None else text)
        deadline = time.monotonic() + min(WINDOW_S, strict.get_timeout())
        pause = 0.001
        while not self._arrived_from(peer):
            cycle = self._cycle()
            if cycle:
                time.sleep(_CONFIRM_S)
                if self._cycle() == cycle:
                    raise P2PDeadlock(self._deadlock_message(cycle))
            if time.monotonic() > deadline:
                return  # go on; the entry stays until the peer arrives (see module doc)
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        self._ready.add(peer)
        self._unblock_if_on(peer)

    def eager(self, nbytes: int) -> bool:
        """Whether a send of nbytes completes without its recv (EAGER_SEND_BYTES, a recorded NCCL finding)."""
        return EAGER_SEND_BYTES is not None and nbytes <= EAGER_SEND_BYTES

    def await_recv(self, peer: int, site: str, settled: Callable[[float], bool], abandon: Callable[[], None],
                   recv_key: str) -> None:
        """A send to `peer` is waited for and its recv is not posted: mark this rank blocked on the peer
        while it waits, and raise P2PDeadlock when the blocked ranks form a cycle back here (two ranks that
        both send first; a ring of blocking sends), the same detection as first calls' (see _cycle).
        settled(timeout) says whether the send has started; abandon() gives it up (P2PDeadlock).
        recv_key: the store key the peer's recv for this send posts (simgpu.p2p_check): while it exists
        the record is stale, whatever the time, so a rank descheduled between its send starting and its
        record being cleared (64 ranks on 2 loaded cores) makes no false cycle."""
        if settled(_BLOCKED_GRACE_S) or not strict.enabled():
            return
        key = self._key("blocked", self.rank)
        text = f"{peer}|send@{recv_key}|{site}"
        self.store.set(key, self._signer.seal(key, text) if self._signer is not None else text)
        pause = 0.005
        while not settled(pause):
            cycle = self._cycle()
            if cycle:
                time.sleep(_CONFIRM_S)
                if not settled(0) and self._cycle() == cycle:
                    abandon()  # the record stays: the other ranks of the cycle see it too
                    raise P2PDeadlock(self._deadlock_message(cycle, sends=True))
            pause = min(pause * 2, 0.05)
        self.store.set(key, "")

    # ------------------------------------------------------------------ store keys (one group creation)
    def _key(self, *parts: Any) -> str:
        if self._generation is None:  # every rank creates the group the same number of times
            self._generation = self.store.add(f"{_PREFIX}/generation/{self.rank}", 1)
        return "/".join([_PREFIX, str(self._generation), *map(str, parts)])

    def _mark_arrived(self, peer: int) -> None:
        self.store.set(self._key("arrived", self.rank, peer), "1")

    def _arrived_from(self, peer: int) -> bool:
        return self.store.check([self._key("arrived", peer, self.rank)])

    def _waiting(self, who: int) -> str:
        return self._key("waiting", who)

    def _blocked_on(self) -> int | None:
        """The peer of this rank's earliest unanswered first call, if one is still unanswered."""
        edge = self._waits_for(self.rank)
        return None if edge is None else edge[0]

    def _unblock_if_on(self, peer: int) -> None:
        key = self._waiting(self.rank)
        if self.store.check([key]) and self.store.get(key).decode().startswith(f"{peer}|"):
            self.store.set(key, "")

    def _waits_for(self, who: int) -> tuple[int, str, str] | None:
        """(peer, op, call site) that `who` is blocked on, or None (not blocked, or its peer has arrived):
        a first call waiting for its pair's rendezvous, else a send waiting for its recv (await_recv)."""
        edge = self._record(self._waiting(who))
        if edge is not None and not self.store.check([self._key("arrived", edge[0], who)]):
            return edge
        return self._record(self._key("blocked", who))

    def _record(self, key: str) -> tuple[int, str, str] | None:
        if not self.store.check([key]):
            return None
        text = self.store.get(key).decode()
        if not text:
            return None
        if self._signer is not None:
            text = self._signer.verified(key, text)
        peer, op, site = text.split("|", 2)
        op, _, recv_key = op.partition("@")  # a waited send's record names its recv's key; a first call's does not
        if recv_key and self.store.check([recv_key]):
            return None  # the send's recv is posted: its rank is no longer blocked (await_recv)
        return int(peer), op, site

    def _cycle(self) -> list[tuple[int, int, str, str]] | None:
        """The chain of blocked ranks from this one, if it comes back here: (rank, peer, op, site) each."""
        chain: list[tuple[int, int, str, str]] = []
        who, seen = self.rank, set()
        while who not in seen:
            seen.add(who)
            edge = self._waits_for(who)
            if edge is None:
                return None
            chain.append((who, *edge))
            who = edge[0]
        return chain if who == self.rank else None

    def _deadlock_message(self, cycle: list[tuple[int, int, str, str]], sends: bool = False) -> str:
        g = self._global
        steps = "; ".join(f"rank {g(r)} {op}({'dst' if op == 'send' else 'src'}={g(p)}) at {site} waits for rank {g(p)}"
                          for r, p, op, site in cycle)
        if sends:
            return (f"point-to-point sends in {self._label()} deadlock: {steps}. Each send waits for the recv "
                    "its peer posts only after its own send (on NCCL: a send larger than its eager buffers "
                    "does not complete before its recv is posted). Post the recvs first on some ranks (e.g. "
                    "odd ranks receive first), or issue the pair together with dist.batch_isend_irecv. "
                    f"(simgpu: global ranks; detected on rank {g(self.rank)})")
        return (f"first point-to-point calls in {self._label()} deadlock on NCCL: {steps}. ProcessGroupNCCL "
                "creates a communicator for each pair at the pair's first send/recv and blocks until both "
                "ranks have arrived, so every rank here waits for a rank that waits in turn. Make the first "
                "calls meet (e.g. even ranks send first, odd ranks receive first) or issue them together "
                f"with dist.batch_isend_irecv. (simgpu: global ranks; detected on rank {g(self.rank)})")

"""The strict check of point-to-point messages: what a rank sends is what its peer receives.

NCCL (and the gloo transport underneath the simulator) delivers the messages of one pair in order,
per tag; a recv into a buffer of another element count or dtype gets partial or reinterpreted data,
silently. So each send and each recv posts a small descriptor (element count, dtype, shape, call
site) to the group's store, keyed by the pair, the tag and the message's number within them:

- the sender posts before it sends, and checks when its send completes: by then the receiver has
  posted its recv (gloo hands data over only to a posted receive), so a mismatch fails the sender too;
- the receiver posts before it receives and checks when its recv completes (the sender's descriptor
  was posted before the data it has just received).

Neither side waits for the other beyond what the transport already waits: an isend never blocks on
its peer's irecv. The sender's transport operation starts on a thread of its own (one per destination,
in order) once the recv it will be delivered to is posted (`await_peer`; gloo transmits only then
anyway), and sends exactly the bytes that recv expects: gloo aborts a process (SIGABRT, in C++) that
receives a message larger than its buffer, so a mismatch would otherwise kill the receiver. A mismatch raises P2PMismatch on both ranks with a table of the two calls; each side
deletes the descriptor it read once they agree. Records are signed like the collectives' (strict.py).
SIMGPU_STRICT=0 turns the check off.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

from simgpu import strict

_PREFIX = "simgpu/p2p-check"


class P2PMismatch(strict.CollectiveMismatch):
    """A send and the recv it is delivered to disagree on element count or dtype (both ranks raise it).

    The pair's byte stream may be out of step afterwards: the pool replaces the ranks."""

    poisons_process_group = True


class P2PChecker:
    """Per group and rank: message numbers per (peer, tag) and the descriptors of unchecked messages."""

    def __init__(self, checker: strict.StrictChecker, label: Callable[[], str] = lambda: "the process group",
                 global_rank: Callable[[int], int] = lambda r: r):
        self.strict = checker
        self.rank = checker.rank
        self._label = label
        self._global = global_rank
        self._count: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def post(self, role: str, peer: int, tag: int, t: Any) -> dict | None:
        """Before the transport sends or receives: this rank's descriptor of the message (None: not checked)."""
        if self.strict.size == 1 or peer == self.rank or not strict.enabled():
            return None
        with self._lock:
            self._count[(role, peer, tag)] += 1
            number = self._count[(role, peer, tag)]
        src, dst = (self.rank, peer) if role == "send" else (peer, self.rank)
        mine = {"role": role, "rank": self.rank, "peer": peer, "tag": tag, "n": number,
                "base": f"{_PREFIX}/{src}->{dst}/{tag}/{number}", "numel": t.numel(),
                "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "site": strict.call_site(),
                "nbytes": t.numel() * t.element_size()}
        key = f"{mine['base']}/{role}"
        self.strict.store.set(key, self.strict.seal(key, strict._dumps(mine)))
        return mine

    def await_peer(self, mine: dict, timeout: float) -> None:
        """Wait (polling, up to `timeout` seconds) until the peer has posted its side of this message, and
        remember its descriptor (expected_bytes); RuntimeError naming the call if it never does."""
        key = self.peer_key(mine)
        store = self.strict.store
        deadline = time.monotonic() + timeout
        pause = 0.0002
        while not store.check([key]):
            if mine.get("abandoned"):
                raise RuntimeError(f"simgpu: rank {self._global(self.rank)}'s {mine['role']} at {mine['site']} was "
                                   "given up (P2PDeadlock)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"simgpu: rank {self._global(self.rank)}'s {mine['role']}({mine['dtype']}"
                                   f"{mine['shape']}) at {mine['site']}: rank {self._global(mine['peer'])} posted no "
                                   f"matching {'recv' if mine['role'] == 'send' else 'send'} within {timeout:g}s")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        mine["theirs"] = self.strict.open(key, store.get(key))

    @staticmethod
    def expected_bytes(mine: dict) -> int | None:
        """How many bytes the peer's side of the message holds (after await_peer; None: not known)."""
        theirs = mine.get("theirs")
        return None if theirs is None else theirs.get("nbytes")

    def peer_key(self, mine: dict) -> str:
        """The store key of the other side's descriptor of this message (present once it has posted)."""
        return f"{mine['base']}/{'recv' if mine['role'] == 'send' else 'send'}"

    def verify(self, mine: dict | None) -> None:
        """When the message completed: compare with the peer's descriptor; P2PMismatch if they disagree."""
        if mine is None:
            return
        key = self.peer_key(mine)
        store = self.strict.store
        theirs = mine.get("theirs")
        if theirs is None:
            if not store.check([key]):
                return  # the peer has not posted (a send completed before the recv was posted) or already agreed
            theirs = self.strict.open(key, store.get(key))
        if theirs["numel"] == mine["numel"] and theirs["dtype"] == mine["dtype"]:
            store.delete_key(key)
            return
        raise P2PMismatch(self._render(mine, theirs))

    def _render(self, mine: dict, theirs: dict) -> str:
        send, recv = (mine, theirs) if mine["role"] == "send" else (theirs, mine)
        g = self._global
        problem = (f"rank {g(send['rank'])} sends {send['numel']} element(s) of {send['dtype']} to rank "
                   f"{g(recv['rank'])}, which receives {recv['numel']} element(s) of {recv['dtype']} "
                   f"(message #{send['n']} from rank {g(send['rank'])} to rank {g(recv['rank'])}, tag {send['tag']})")
        calls = [{"rank": g(d["rank"]), "site": d["site"],
                  "text": f"{d['role']}({d['dtype']}{d['shape']}, {'dst' if d['role'] == 'send' else 'src'}="
                          f"{g(d['peer'])}, tag={d['tag']})"} for d in sorted((send, recv), key=lambda d: d["rank"])]
        head = (f"simgpu: ranks of {self._label()} disagree on a point-to-point message (on NCCL: partial or "
                f"reinterpreted data, silently)")
        return strict.render_mismatch(self._label(), 0, calls, [problem], head=head)

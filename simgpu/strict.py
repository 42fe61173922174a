"""Strict collective checking: every rank of a group must make the same call, or all of them fail fast.

Before each collective, every rank of the group posts a small JSON descriptor of its call (op,
sequence number, root, reduce op, counts and dtypes, split sizes, and the user's call site) to the
group's store under (seq, rank) and returns (`post`); the check is settled (`settle`) on the group's
issuer thread (simgpu.issue_order), which waits a bounded time for the other ranks' descriptors,
reads them all with one multi_get, compares what NCCL needs to agree, and only then starts the
collective: issuing a call never waits for the other ranks, as on NCCL. Cost per collective: one
set, one wait, one multi_get and one delete, the delete once the collective has started (`tidy`). A rank has at most MAX_UNSETTLED calls posted and not
yet settled, so a rank that posted call m has read every check up to m - MAX_UNSETTLED, and its
descriptors that old are deleted (`_forget_through`).

A rank whose call fails NCCL's local argument checks (dtype, layout, sizes) still posts a
descriptor, marked refused, without waiting: it raises its own NCCL error at once, and the ranks
that passed their checks raise CollectiveMismatch naming it, where NCCL would leave them hanging.

On NCCL a disagreement is undefined behaviour, usually a hang until the watchdog fires (10 min);
here it is a `CollectiveMismatch` on every rank, with a table of who called what, where. A rank
that never arrives gives `CollectiveTimeout` on the ranks that did, naming who is missing and the
last call each of them made. After a timeout the group is out of step, as an NCCL communicator is
after its watchdog fires: the ranks that timed out refuse further collectives on that group
(restart the ranks), and a late rank that arrives finds a tombstone and fails with a mismatch.

Point-to-point ops (send/recv/isend/irecv, batch_isend_irecv) are not part of this sequence: they
have no group order (NCCL runs them on per-pair streams, in any interleaving with collectives). They
are checked per pair instead (simgpu.p2p_check: the k-th message from rank i to rank j, per tag, must
agree on element count and dtype with the recv it is delivered to; both ranks raise P2PMismatch). A
missing peer surfaces as a blocked wait that the pool's watchdog reports with every rank's stack.
(What NCCL does make blocking, the first send/recv of each pair, is modelled in simgpu.p2p_pairs,
with its deadlock reported.)

Fields compared per collective are only those NCCL needs to agree: element counts (not shapes: a
(2, 3) tensor all-reduces with a (6,) one on NCCL), dtypes, reduce op, root, and for the ops that
move data between pairs, what each rank sends to each other rank against what that rank expects.

How the check scales: in a group of fewer than 9 ranks every rank reads every descriptor and compares
them itself (one multi_get: the shortest path). From 9 ranks on (SIMGPU_STRICT_LEADER_FROM), the group's
rank 0 reads them, compares, and posts a signed verdict that the others read (one get each): per
collective the group does O(N) store reads and comparisons instead of O(N^2) (O(N^3) for all_to_all's
per-pair counts), which at 64 ranks on 2 cores cost more than the collective itself. The messages
are the same: the leader renders the mismatch table once, for every rank; a rank whose wait for the
verdict times out diagnoses who is missing itself, as in a small group.

Settings: SIMGPU_STRICT_TIMEOUT (seconds, default 30) or `set_timeout()`; SIMGPU_STRICT=0 turns the
check off (the emulation of NCCL's semantics stays on).
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
import sys
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from simgpu import settings
from simgpu.settings import GROUP_SECRET_ENV

DEFAULT_TIMEOUT = 30.0
SECRET_ENV = GROUP_SECRET_ENV  # set by RankPool and `simgpu run` for every rank: records are signed with it
_KEY_PREFIX = "simgpu/strict"
MAX_UNSETTLED = 8  # posted calls of a rank whose check has not been settled yet (see StrictChecker.post)
LEADER_FROM_ENV = "SIMGPU_STRICT_LEADER_FROM"
LEADER_FROM = 9  # groups this large have their rank 0 compare and publish a verdict (see StrictChecker._settle)
_MAX_PAIR_LINES = 8
_timeout_override: float | None = None
_SKIP_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch,))
_SIMGPU_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SKIP_FILES = ("typing_extensions.py", f"{os.sep}contextlib.py", f"{os.sep}functools.py", f"{os.sep}warnings.py")


class ForgedRecord(RuntimeError):
    """A strict-check record in the group's store that no rank of the group wrote (bad or missing HMAC)."""

    poisons_process_group = True


class CollectiveMismatch(RuntimeError):
    """The ranks of a group made different calls at the same point (every rank raises it)."""


class CollectiveTimeout(RuntimeError):
    """Some ranks of a group did not reach a collective before the strict deadline.

    The group is unusable afterwards (as NCCL's is after its watchdog fires): the rank pool sees
    `poisons_process_group` and replaces its ranks before the next call.
    """

    poisons_process_group = True

    def __init__(self, message: str, missing_ranks: list[int] | None = None):
        super().__init__(message)
        self.missing_ranks = missing_ranks  # global ranks that never arrived: the cause, not the raiser


def set_timeout(seconds: float | None) -> None:
    """Override the strict deadline for this process (None: back to SIMGPU_STRICT_TIMEOUT / 30 s)."""
    global _timeout_override
    _timeout_override = None if seconds is None else float(seconds)


def get_timeout(default: float | None = None) -> float:
    """The deadline for the other ranks to arrive, read on every call so tests can change it."""
    if _timeout_override is not None:
        return _timeout_override
    value = os.environ.get("SIMGPU_STRICT_TIMEOUT")
    if not value:
        return DEFAULT_TIMEOUT if default is None else default
    return settings.strict_timeout(value)


def leader_from() -> int:
    """The group size from which rank 0 checks for the group (SIMGPU_STRICT_LEADER_FROM, default 9)."""
    value = os.environ.get(LEADER_FROM_ENV)
    return settings.strict_leader_from(value) if value else LEADER_FROM


def enabled() -> bool:
    """SIMGPU_STRICT=0 turns the cross-rank check off (for benchmarks); NCCL's local rules stay on."""
    return os.environ.get("SIMGPU_STRICT", "1").strip().lower() not in ("0", "false", "no", "off")


def call_site() -> str:
    """file:line of the first stack frame outside torch, simgpu and decorator plumbing."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not _is_plumbing(name):
            return f"{_short_path(name, os.getcwd())}:{frame.f_lineno}"
        frame = frame.f_back
    return "(no user frame: called from inside torch, e.g. autograd)"


# Both run on every collective for the same few files: cached, they cost a dict look-up.
@functools.lru_cache(maxsize=1024)
def _is_plumbing(filename: str) -> bool:
    return (filename.startswith(_SKIP_DIRS) or filename.startswith(_SIMGPU_DIR) or filename.startswith("<frozen")
            or filename.endswith(_SKIP_FILES))


@functools.lru_cache(maxsize=1024)
def _short_path(path: str, cwd: str) -> str:
    """path relative to cwd when it lies below it, else as it is (cwd is part of the cache key)."""
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _dumps(descriptor: dict) -> str:
    return json.dumps(descriptor, separators=(",", ":"))


@dataclass
class Call:
    """One rank's description of the collective it is about to run.

    agree: fields every rank must give identically (compared key by key).
    send / recv: per peer, elements this rank sends to / expects from each rank (None: nothing);
      rank i's send[j] must equal rank j's recv[i].
    text: a one-line rendering for the mismatch table.
    """

    op: str
    text: str
    agree: dict[str, Any] = field(default_factory=dict)
    send: list[int | None] | None = None
    recv: list[int | None] | None = None
    site: str = ""


@dataclass
class Ticket:
    """A posted call whose check is still to be settled: this rank's descriptor and the group's keys."""

    mine: dict
    keys: list[str]


class StrictChecker:
    """Per-group sequence of strict checks over the group's (already prefixed) store."""

    def __init__(self, store: dist.Store, rank: int, size: int,
                 label: Callable[[], str] = lambda: "the process group", default_timeout: float | None = None,
                 global_rank: Callable[[int], int] = lambda r: r):
        """label() names the group in messages (called only when one is raised); default_timeout
        replaces the 30 s default (SIMGPU_STRICT_TIMEOUT and set_timeout() still win); global_rank
        maps a group rank to its global rank (a timeout names the missing ranks globally)."""
        self._global_rank = global_rank
        secret = os.environ.get(SECRET_ENV, "")
        self._secret = secret.encode() if secret else None
        self.default_timeout = default_timeout
        self.store = store
        self._channel_store: dist.Store | None = None  # see connect()
        self._post_store: dist.Store | None = None
        self._channel_client: Any = None
        self._connect_lock = threading.Lock()
        self.rank = rank
        self.size = size
        self.seq = 0
        self._label = label
        self._broken: str | None = None
        self._lock = threading.Lock()  # one sequence per group even if several threads issue calls
        self._progress = threading.Condition()  # guards _unsettled: posted calls whose check is not settled
        self._unsettled = 0
        self._own: list[int] = []  # sequence numbers of this rank's descriptors still in the store
        self._verdicts: list[int] = []  # the leader's: sequence numbers of its verdicts still in the store
        self.leader = size >= leader_from()  # rank 0 compares and posts a verdict (see _settle)

    def _key(self, seq: int, rank: int | str) -> str:
        return f"{_KEY_PREFIX}/{seq}/{rank}"

    def _io(self) -> dist.Store:
        """Where this group's checks wait for and read descriptors (the thread that settles checks)."""
        if self._channel_store is None:
            self.connect()
        return self._channel_store

    def _post_io(self) -> dist.Store:
        """Where this rank posts its descriptors (the threads that issue calls)."""
        if self._post_store is None:
            self.connect()
        return self._post_store

    def connect(self) -> None:
        """Two connections to the TCPStore server when the group's store is one (else the group's store
        serves both): one to post on, shared by the process's groups (`_posting_client`), and one of the
        group's own to wait on.

        The waiting one has the strict deadline as its timeout, so one multi_get both waits for the
        group's descriptors and reads them (a check is then set + multi_get, two round trips fewer
        than set + wait + multi_get); a call can post while an earlier check still waits (a TCPStore
        connection serves one request at a time), and the group's other users of the store never queue
        behind a check. Their keys live under a name the group's ranks agree on through the group's store.
        """
        with self._connect_lock:
            if self._channel_store is not None:
                return
            waiting, posting = self.store, self.store
            tcp = _tcp_store_under(self.store)
            if tcp is not None:
                try:
                    timeout = timedelta(seconds=get_timeout(self.default_timeout))
                    clients = [dist.TCPStore(tcp.host, tcp.port, is_master=False, wait_for_workers=False,
                                             timeout=timeout), _posting_client(tcp, timeout)]
                    name = self.store.compare_set(f"{_KEY_PREFIX}/channel", "", secrets.token_hex(8)).decode()
                    waiting, posting = (dist.PrefixStore(f"{_KEY_PREFIX}/{name}", c) for c in clients)
                    self._channel_client = clients[0]
                except (RuntimeError, ValueError):  # no more connections here: the group's store serves
                    waiting, posting = self.store, self.store
            self._post_store = posting
            self._channel_store = waiting

    def _gather(self, keys: list[str], timeout: float) -> list[bytes]:
        """Every rank's descriptor under keys, waiting up to `timeout` seconds for them to be posted."""
        io = self._io()
        if self._channel_client is not None:
            self._channel_client.set_timeout(timedelta(seconds=timeout))
            return io.multi_get(keys)
        io.wait(keys, timedelta(seconds=timeout))
        return io.multi_get(keys)

    def check(self, call: Call) -> list[dict] | None:
        """Post this rank's call, wait for the group's, raise on any disagreement.

        Returns every rank's descriptor (rank order), or None when checking is off or the group's
        leader compared them.
        """
        ticket = self.post(call)
        return None if ticket is None else self.settle(ticket)

    def post(self, call: Call) -> Ticket | None:
        """Post this rank's call and return (None: nothing to check: one rank, or checking off).

        Tickets must be settled one at a time, in the order they were posted (simgpu.issue_order).
        At most MAX_UNSETTLED of them wait to be settled: a call beyond that waits here for the
        oldest, which bounds how far a rank runs ahead and tells when descriptors may go (_forget).
        """
        with self._progress:
            while self._unsettled >= MAX_UNSETTLED:
                self._progress.wait()
            with self._lock:
                if self._broken is not None:
                    raise CollectiveTimeout(self._broken)
                if self.size == 1 or not enabled():
                    return None
                mine = self._post(call)
            self._unsettled += 1
        return Ticket(mine, [self._key(mine["seq"], r) for r in range(self.size)])

    def settle(self, ticket: Ticket) -> list[dict]:
        """Wait for the group's descriptors of a posted call and raise on any disagreement."""
        try:
            return self._settle(ticket)
        finally:
            with self._progress:
                self._unsettled -= 1
                self._progress.notify_all()

    def tidy(self, ticket: Ticket) -> None:
        """Delete what the group no longer needs once this call's check has passed (the issuer calls it
        after starting the collective, so the deletes, one store round trip each, overlap the collective
        instead of delaying the next check before it waits for the group). Passing check n means every
        rank posted n, so every rank has settled (read) every check up to n - MAX_UNSETTLED."""
        self._forget_through(ticket.mine["seq"] - MAX_UNSETTLED)

    def _settle(self, ticket: Ticket) -> list[dict] | None:
        """Every rank's descriptors, compared here (a small group, or the leader); None where the
        group's leader compared them and said they agree."""
        if self._broken is not None:
            raise CollectiveTimeout(self._broken)
        mine, keys = ticket.mine, ticket.keys
        seq = mine["seq"]
        timeout = get_timeout(self.default_timeout)
        self._forget_through(seq - 1 - MAX_UNSETTLED)  # (what `tidy` left, if it did not run) while the others arrive
        if self.leader and self.rank != 0:
            verdict = self._await_verdict(seq, timeout)
            if verdict is not None and "timeout" not in verdict:
                if "mismatch" in verdict:
                    if verdict.get("abandoned"):
                        self._broken = verdict["abandoned"]
                    raise CollectiveMismatch(verdict["mismatch"])
                return None
            self._timed_out(mine, timeout)  # no verdict, or the leader timed out: who is missing, from here
            return self._compare(seq, keys, self._io().multi_get(keys))
        try:
            values = self._gather(keys, timeout)
        except (dist.DistStoreError, RuntimeError) as exc:  # a FileStore times out with a plain RuntimeError
            if not isinstance(exc, dist.DistStoreError) and "timeout" not in str(exc).lower():
                raise
            if self.leader:
                self._publish(seq, {"timeout": True})  # the waiting ranks diagnose it themselves, now
            self._timed_out(mine, timeout)
            values = self._io().multi_get(keys)
        return self._compare(seq, keys, values, publish=self.leader)

    def _compare(self, seq: int, keys: list[str], values: list[bytes], publish: bool = False) -> list[dict]:
        """Raise CollectiveMismatch if the descriptors disagree; the leader posts its verdict first."""
        calls = [self.open(k, v) for k, v in zip(keys, values)]
        problems = find_problems(calls)
        if not problems:
            if publish:
                self._publish(seq, {"ok": True})
            return calls
        message = render_mismatch(self._label(), seq, calls, problems)
        abandoned = None
        if any(c.get("abandoned") for c in calls):
            abandoned = (f"simgpu: {self._label()} is unusable: a rank abandoned collective #{seq} "
                         f"after a strict timeout; its ranks are out of step (restart them)")
            self._broken = abandoned
        if publish:
            self._publish(seq, {"mismatch": message, "abandoned": abandoned})
        raise CollectiveMismatch(message)

    def _publish(self, seq: int, verdict: dict) -> None:
        """The leader's verdict on collective seq, signed; verdicts that old are deleted as descriptors are."""
        key = self._key(seq, "verdict")
        self._post_io().set(key, self.seal(key, _dumps(verdict)))
        with self._lock:
            self._verdicts.append(seq)

    def _await_verdict(self, seq: int, timeout: float) -> dict | None:
        """The leader's verdict on collective seq, waiting up to `timeout` seconds (None: none came)."""
        key = self._key(seq, "verdict")
        io = self._io()
        try:
            if self._channel_client is not None:
                self._channel_client.set_timeout(timedelta(seconds=timeout))
            else:
                io.wait([key], timedelta(seconds=timeout))
            raw = io.get(key)
        except (dist.DistStoreError, RuntimeError) as exc:
            if not isinstance(exc, dist.DistStoreError) and "timeout" not in str(exc).lower():
                raise
            return None
        return json.loads(self.verified(key, raw))

    def reject(self, call: Call, error: BaseException) -> None:
        """This rank refused its call locally (NCCL's argument checks): post that and return at once.

        The caller raises its own error; the other ranks, who passed their checks, find this
        descriptor and raise CollectiveMismatch instead of waiting for a collective that never comes.
        """
        with self._lock:
            if self._broken is not None or self.size == 1 or not enabled():
                return
            message = str(error).splitlines()[0] if str(error) else ""
            self._post(call, rejected=f"{type(error).__name__}: {message}")

    def _post(self, call: Call, **extra: Any) -> dict:
        """Take the next sequence number and store this rank's descriptor under it."""
        if not call.site:
            call.site = call_site()
        self.seq += 1
        mine = {"op": call.op, "seq": self.seq, "rank": self.rank, "site": call.site, "text": call.text,
                "agree": call.agree, "send": call.send, "recv": call.recv, **extra}
        key = self._key(self.seq, self.rank)
        self._post_io().set(key, self.seal(key, _dumps(mine)))
        self._own.append(self.seq)
        return mine

    def _forget_through(self, seq: int) -> None:
        """Delete this rank's descriptors up to seq, once every rank has settled it.

        A rank posts call m only when at most MAX_UNSETTLED - 1 of its earlier calls are unsettled
        (post), and settles in order, so a rank that has posted m has settled (read) every check up to
        m - MAX_UNSETTLED. A settle of n knows from the settle before that every rank posted n - 1, so
        it deletes up to n - 1 - MAX_UNSETTLED, while it waits for the others anyway.
        """
        with self._lock:  # _post appends from the issuing threads
            old = [self._key(s, self.rank) for s in self._own if s <= seq]
            old += [self._key(s, "verdict") for s in self._verdicts if s <= seq]
            self._own = [s for s in self._own if s > seq]
            self._verdicts = [s for s in self._verdicts if s > seq]
        for key in old:
            self._io().delete_key(key)

    def _timed_out(self, mine: dict, timeout: float) -> None:
        """Diagnose who is missing, leave a tombstone for late ranks, refuse further collectives.

        Returns (and the check goes on) if every rank turns out to have arrived by now.
        """
        seq = mine["seq"]
        lines = []
        arrived = []
        missing = []
        for r in range(self.size):
            desc = self._read(seq, r)
            if desc is not None:
                arrived.append(r)
                lines.append(f"  rank {r}: arrived, {desc['text']} at {desc['site']}")
                continue
            missing.append(r)
            last = self._read(seq - 1, r) or self._read(seq - 2, r)
            where = (f"its last collective was #{last['seq']}: {last['text']} at {last['site']}" if last
                     else "no earlier collective of it is on record")
            lines.append(f"  rank {r}: MISSING; {where}")
        if not missing:  # the last rank arrived just after the deadline: no harm done
            return
        message = (f"simgpu: collective #{seq} on {self._label()} ({mine['text']} at {mine['site']}) timed out "
                   f"after {timeout:g}s: rank(s) {missing} did not arrive, rank(s) {arrived} did.\n"
                   + "\n".join(lines))
        tombstone = dict(mine, abandoned=True, text=f"abandoned {mine['text']} after a {timeout:g}s timeout")
        key = self._key(seq, self.rank)
        self._io().set(key, self.seal(key, _dumps(tombstone)))
        self._broken = (f"simgpu: {self._label()} is unusable: collective #{seq} timed out earlier on this rank; "
                        f"its ranks are out of step (restart them)")
        raise CollectiveTimeout(message, [self._global_rank(r) for r in missing])

    def _read(self, seq: int, rank: int) -> dict | None:
        if seq < 1:
            return None
        key = self._key(seq, rank)
        io = self._io()
        if not io.check([key]):
            return None
        return self.open(key, io.get(key))

    # A descriptor is JSON, then (with SIMGPU_GROUP_SECRET set) "|" and the HMAC-SHA256 of key and JSON
    # under the group's secret: whoever else reaches the store cannot write one the group accepts.
    def seal(self, key: str, text: str) -> str:
        """The record stored under key: text, signed when the group has a secret."""
        if self._secret is None:
            return text
        return f"{text}|{_mac(self._secret, key, text)}"

    def open(self, key: str, raw: bytes | str) -> dict:
        """The descriptor stored under key; ForgedRecord if the group did not sign it."""
        return json.loads(self.verified(key, raw))

    def verified(self, key: str, raw: bytes | str) -> str:
        """The text stored under key, its signature checked and removed (ForgedRecord if it fails)."""
        text = raw.decode() if isinstance(raw, bytes) else raw
        if self._secret is not None:
            body, sep, mac = text.rpartition("|")
            good = _mac(self._secret, key, body)
            if not sep or not hmac.compare_digest(mac, good):
                raise ForgedRecord(f"simgpu: the strict-check record {key!r} of {self._label()} is not signed with "
                                   f"this group's secret ({SECRET_ENV}): something outside the group wrote it "
                                   f"to the store; it was not taken as a rank's call")
            text = body
        return text


def _mac(secret: bytes, key: str, text: str) -> str:
    return hmac.new(secret, key.encode() + b"\0" + text.encode(), hashlib.sha256).hexdigest()


# ----------------------------------------------------------------------------- comparison
def find_problems(calls: Sequence[dict]) -> list[str]:
    """Every way the ranks' descriptors disagree, as sentences (empty: they agree)."""
    problems = []
    abandoned = [c["rank"] for c in calls if c.get("abandoned")]
    if abandoned:
        problems.append(f"rank(s) {abandoned} gave up on this collective after a strict timeout")
    refused = [c for c in calls if c.get("rejected")]
    for c in refused:
        problems.append(f"rank {c['rank']} refused its call before communicating: {c['rejected']}")
    if refused:
        return problems
    ops = {c["op"] for c in calls}
    if len(ops) > 1:
        problems.append("ranks called different collectives: " + _per_rank(calls, lambda c: c["op"]))
        return problems
    keys = sorted({k for c in calls for k in c["agree"]})
    for key in keys:
        values = [json.dumps(c["agree"].get(key)) for c in calls]
        if len(set(values)) > 1:
            problems.append(f"'{key}' differs: " + _per_rank(calls, lambda c: c["agree"].get(key)))
    problems.extend(_pair_problems(calls))
    return problems


def _pair_problems(calls: Sequence[dict]) -> list[str]:
    """Rank i's send[j] must equal rank j's recv[i] (elements moved from i to j)."""
    if not any(c.get("send") is not None or c.get("recv") is not None for c in calls):
        return []
    out = []
    n = len(calls)
    for i in range(n):
        for j in range(n):
            sends = calls[i].get("send") or [None] * n
            recvs = calls[j].get("recv") or [None] * n
            s, r = sends[j], recvs[i]
            if s != r:
                out.append(f"rank {i} sends {_count(s)} to rank {j}, which expects {_count(r)} from rank {i}")
    if len(out) > _MAX_PAIR_LINES:
        out = out[:_MAX_PAIR_LINES] + [f"... and {len(out) - _MAX_PAIR_LINES} more pair(s) that disagree"]
    return out


def _count(v: int | None) -> str:
    return "nothing" if v is None else f"{v} element(s)"


def _per_rank(calls: Sequence[dict], get: Callable[[dict], Any]) -> str:
    return ", ".join(f"rank {c['rank']}: {get(c)}" for c in calls)


def render_mismatch(label: str, seq: int, calls: Sequence[dict], problems: list[str], head: str | None = None) -> str:
    """The CollectiveMismatch message: what differs, then one row per rank (call, call site)."""
    rows = [("rank", "call", "called at")]
    for c in calls:
        rows.append((str(c["rank"]), c["text"] + (" -> refused" if c.get("rejected") else ""), c["site"]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    table = ["  " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    table.insert(1, "  " + "-+-".join("-" * w for w in widths))
    head = head or f"simgpu: ranks of {label} disagree at collective #{seq} (on NCCL: undefined behaviour, usually a hang)"
    return "\n".join([head] + [f"  - {p}" for p in problems] + table)


_posting_clients: dict[tuple[str, int, int], dist.TCPStore] = {}
_posting_lock = threading.Lock()


def _posting_client(tcp: Any, timeout: timedelta) -> dist.TCPStore:
    """This process's connection to the store server at tcp's address for every group's posts. A post
    is a set, which never waits for another rank, so the groups can share one (a group's waiting
    connection cannot be shared: a check holds it until the group's ranks arrive). Each connection
    costs the server a round trip or two; at 64 ranks on 2 cores, with the server one process among
    64 busy ranks, a 3-D mesh's four groups spent about a minute per rank opening their eight."""
    key = (tcp.host, tcp.port, os.getpid())  # a forked child opens its own
    with _posting_lock:
        client = _posting_clients.get(key)
        if client is None:
            client = _posting_clients[key] = dist.TCPStore(tcp.host, tcp.port, is_master=False,
                                                           wait_for_workers=False, timeout=timeout)
        return client


def _tcp_store_under(store: dist.Store) -> Any:
    """The TCPStore beneath a chain of PrefixStores, or None (FileStore, HashStore, ...)."""
    while isinstance(store, dist.PrefixStore):
        store = getattr(store, "underlying_store", None)
    return store if isinstance(store, dist.TCPStore) else None

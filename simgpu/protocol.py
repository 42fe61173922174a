"""The call protocol between a pool's controller and its ranks (simgpu.pool, simgpu.rank).

The controller pickles every rank's call before sending any (an argument that cannot be pickled
names its rank and nothing is sent), sends ("call", number, payload), and reads exactly one reply per
rank, tagged with that number. A reply the controller cannot unpickle is that rank's failure; the
stream stays in step, since the whole message was read. A reply to another call number means the
pool is out of step: it is torn down, never returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable


@dataclass
class RankOutcome:
    """What one rank did with one call: its return value, or the exception it raised."""

    rank: int
    ok: bool
    value: Any = None
    error_type: str | None = None
    error: str | None = None
    traceback: str | None = None
    seconds: float = 0.0
    poisoned: bool = False  # the error left the process group unusable (exception's poisons_process_group)
    missing_ranks: list[int] | None = None  # a strict timeout: the global ranks that never arrived
    pending: list[str] | None = None  # ops the rank left pending when it answered (simgpu.rank.unfinished_operations)

    def describe(self) -> str:
        if self.ok:
            return f"rank {self.rank}: ok"
        return f"rank {self.rank}: {self.error_type}: {self.error}"


class UnreadableReply(Exception):
    """The controller could not unpickle a rank's reply (error_type of that rank's outcome)."""


def payloads(fn: Callable[..., Any], per_rank_args: list[tuple]) -> list[bytes]:
    """Pickle every rank's call before sending any, naming the rank whose arguments cannot be pickled.

    Ranks given the very same arguments (RankPool.run) share one pickle, so a conformance case of megabytes
    is pickled once, unless it passes something a process may take only once: a file descriptor or shared
    memory handed over by multiprocessing's or torch's reducers (a tensor argument), pickled per rank."""
    out: list[bytes] = []
    for rank, args in enumerate(per_rank_args):
        if rank and args is per_rank_args[rank - 1] and not _takes_handles(out[-1]):
            out.append(out[-1])
            continue
        try:
            out.append(bytes(ForkingPickler.dumps((fn, tuple(args)))))
        except Exception as exc:
            raise TypeError(f"RankPool.run: cannot send {name_of(fn)} to rank {rank}: its function or arguments "
                            f"{short_repr(args)} cannot be pickled ({type(exc).__name__}: {exc}); nothing was sent"
                            ) from exc
    return out


def _takes_handles(pickled: bytes) -> bool:
    """Whether a pickle rebuilds something through a one-time handle (resource_sharer's file descriptors,
    torch's shared-memory storages): then every rank needs a pickle of its own."""
    return b"resource_sharer" in pickled or b"torch.multiprocessing" in pickled


def short_repr(obj: Any) -> str:
    try:
        text = repr(obj)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(obj).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def name_of(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def send(conn: Connection, msg: Any) -> None:
    conn.send(msg)


def recv_bytes(conn: Connection) -> bytes:
    return conn.recv_bytes()


def read_reply(conn: Connection, rank: int, call_id: int) -> RankOutcome | None:
    """This rank's reply to call `call_id`; None if the rank is gone. A reply the controller cannot
    unpickle is that rank's failure (the stream stays in step: the whole message was read)."""
    try:
        data = recv_bytes(conn)
    except (EOFError, OSError):
        return None
    try:
        msg = ForkingPickler.loads(data)
    except Exception as exc:  # noqa: BLE001 - e.g. a class the controller cannot import
        return RankOutcome(rank, False, error_type=f"{__name__}.UnreadableReply",
                           error=f"the controller could not unpickle rank {rank}'s reply: "
                                 f"{type(exc).__name__}: {exc}")
    if not (isinstance(msg, tuple) and len(msg) >= 2 and msg[1] == call_id):
        raise OutOfStep(f"rank {rank} answered {msg[:2]!r:.80} to call #{call_id}")
    return outcome(rank, msg)


class OutOfStep(RuntimeError):
    """A reply that does not belong to the current call: the pool is torn down (never returned)."""


def outcome(rank: int, msg: tuple) -> RankOutcome:
    if msg[0] == "ok":
        _, _, value, seconds, *extra = msg
        return RankOutcome(rank, True, value=value, seconds=seconds, pending=(extra[0] if extra else {}).get("pending"))
    _, _, etype, text, tb, seconds, poisoned, details = msg
    details = details or {}
    return RankOutcome(rank, False, error_type=etype, error=text, traceback=tb, seconds=seconds, poisoned=poisoned,
                       missing_ranks=details.get("missing_ranks"), pending=details.get("pending"))

"""Fault injection for the "sim" backend: kill, delay, raise in, hang or corrupt one rank at its k-th collective.

A `Fault` names a rank (global rank), a collective call of that rank (the k-th, counting from 1 from
the moment the fault is installed, optionally counting only collectives of one name such as
"all_reduce") and what happens there:

    kill     the rank process SIGKILLs itself (no exception, no reply: a crashed GPU worker)
    delay    the rank sleeps `seconds`, then runs the collective normally (a straggler)
    raise    the rank raises `exc_type(message)` instead of entering the collective
             (default RuntimeError naming the fault); the other ranks are told at once through the
             strict check and raise CollectiveMismatch instead of waiting
    hang     the rank sleeps forever (until the pool's watchdog kills it); stack dumps show
             `_hang_injected_fault` in simgpu/faults.py
    corrupt  the rank's input tensors are changed in place just before the collective runs:
             `amount` is added to every element (default 1 for integers, 1024.0 for floating and
             complex types), bool elements are negated. Deterministic; only what this rank sends
             changes (for broadcast/scatter only the root sends).

Faults fire once. They are per process: `install(*faults)` / `clear()` / `with injected(...)` act in the
process that calls them, i.e. on a rank; a fault whose rank is not this process's rank never fires.
From a controller, install them through the rank pool:

    pool.run(simgpu.faults.install_on_rank, [faults.kill(1, at=3)])

Or, for an unmodified program, put them in the environment of the ranks (read at the first collective
of each rank process): SIMGPU_FAULTS='[{"rank": 1, "action": "kill", "at": 3}]'; `env_pair(*faults)`
gives that (key, value) for `Binding(env=...)`.

The sim backend calls `before_collective` at the entry of every collective (simgpu.backend's
`_collective` decorator), before NCCL's local checks: what counts as one collective is what the strict
check counts (each pair of a *_coalesced call separately, barrier included, point-to-point not).
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterator, Sequence

ENV_VAR = "SIMGPU_FAULTS"
ACTIONS = ("kill", "delay", "raise", "hang", "corrupt")
# What a fault's `op` may name: the collectives the sim backend counts (simgpu.backend's _collective
# names; tests/test_isolation.py keeps the two in step). A misspelled op would never fire.
COUNTED_OPS = ("all_gather", "all_gather_into_tensor", "all_reduce", "all_reduce_coalesced", "all_to_all",
               "all_to_all_single", "barrier", "broadcast", "gather", "reduce", "reduce_scatter",
               "reduce_scatter_tensor", "scatter")
# Collectives whose input is their first argument; for the others it is the second (outputs first).
_INPUT_FIRST = {"all_reduce", "all_reduce_coalesced", "reduce", "broadcast"}
_NO_INPUT = {"barrier"}


@dataclass(frozen=True)
class Fault:
    """One injected fault: `action` on global rank `rank` at its `at`-th collective (named `op`, if given)."""

    rank: int
    action: str
    at: int = 1
    op: str | None = None
    seconds: float = 0.0  # delay
    exc_type: str = "RuntimeError"  # raise: a builtin name or "module.Class"
    message: str | None = None  # raise
    amount: float | None = None  # corrupt

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"simgpu.faults: unknown action {self.action!r} (one of {', '.join(ACTIONS)})")
        if not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"simgpu.faults: rank must be an int >= 0, got {self.rank!r}")
        if not isinstance(self.at, int) or self.at < 1:
            raise ValueError(f"simgpu.faults: 'at' counts collectives from 1, got {self.at!r}")
        if not isinstance(self.seconds, (int, float)) or not 0 <= self.seconds < float("inf"):
            raise ValueError(f"simgpu.faults: delay seconds must be a finite number >= 0, got {self.seconds!r}")
        if self.op is not None and self.op not in COUNTED_OPS:
            import difflib

            close = difflib.get_close_matches(str(self.op), COUNTED_OPS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (one of {', '.join(COUNTED_OPS)})"
            raise ValueError(f"simgpu.faults: op {self.op!r} is not a collective the sim backend counts{hint}; "
                             "the fault would never fire")

    def describe(self) -> str:
        what = {"delay": f"delay {self.seconds:g}s", "raise": f"raise {self.exc_type}",
                "corrupt": "corrupt input" + ("" if self.amount is None else f" by {self.amount:g}")}
        return (f"{what.get(self.action, self.action)} on rank {self.rank} at its {_ordinal(self.at)} "
                f"{self.op or 'collective'}")

    def to_dict(self) -> dict:
        """The JSON form (fields left at their defaults are omitted)."""
        defaults = {f.name: f.default for f in fields(self)}
        return {k: v for k, v in asdict(self).items() if k in ("rank", "action") or v != defaults[k]}

    @classmethod
    def from_dict(cls, data: dict) -> "Fault":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"simgpu.faults: unknown fault field(s) {sorted(unknown)} (known: {sorted(known)})")
        return cls(**data)


# ----------------------------------------------------------------------------- constructors
def kill(rank: int, at: int = 1, op: str | None = None) -> Fault:
    """Rank `rank` SIGKILLs itself at its `at`-th collective (the pool reports a crash)."""
    return Fault(rank, "kill", at, op)


def delay(rank: int, seconds: float, at: int = 1, op: str | None = None) -> Fault:
    """Rank `rank` sleeps `seconds` before its `at`-th collective, which then runs normally."""
    return Fault(rank, "delay", at, op, seconds=float(seconds))


def raise_(rank: int, exc_type: type | str = RuntimeError, message: str | None = None, at: int = 1,
           op: str | None = None) -> Fault:
    """Rank `rank` raises exc_type(message) at its `at`-th collective instead of running it."""
    if isinstance(exc_type, type):
        module = exc_type.__module__
        exc_type = exc_type.__qualname__ if module == "builtins" else f"{module}.{exc_type.__qualname__}"
    return Fault(rank, "raise", at, op, exc_type=exc_type, message=message)


def hang(rank: int, at: int = 1, op: str | None = None) -> Fault:
    """Rank `rank` blocks forever at its `at`-th collective (only killing the process ends it)."""
    return Fault(rank, "hang", at, op)


def corrupt(rank: int, at: int = 1, op: str | None = None, amount: float | None = None) -> Fault:
    """Rank `rank` perturbs its input tensors in place just before its `at`-th collective runs."""
    return Fault(rank, "corrupt", at, op, amount=amount)


# ----------------------------------------------------------------------------- JSON / environment
def to_json(*faults: Fault) -> str:
    return json.dumps([f.to_dict() for f in faults])


def check_ranks(faults: Sequence[Fault], world_size: int, where: str) -> None:
    """ValueError when a fault names a rank that `where` (world_size ranks) does not have: it would never fire."""
    for f in faults:
        if f.rank >= world_size:
            raise ValueError(f"simgpu.faults: a fault names rank {f.rank} ({f.describe()}), but {where} has "
                             f"{world_size} rank(s), 0..{world_size - 1}; it would never fire")


def from_json(text: str) -> list[Fault]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"simgpu.faults: {ENV_VAR} is not JSON: {exc}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ValueError(f"simgpu.faults: {ENV_VAR} must be a JSON list of objects, got {text!r}")
    return [Fault.from_dict(d) for d in data]


def env_pair(*faults: Fault) -> tuple[str, str]:
    """(SIMGPU_FAULTS, json) for simgpu.pool.Binding(env=(...,)): every fresh rank of the pool arms them."""
    return (ENV_VAR, to_json(*faults))


# ----------------------------------------------------------------------------- per-process state
class _Armed:
    __slots__ = ("fault", "seen")

    def __init__(self, fault: Fault):
        self.fault = fault
        self.seen = 0


_armed: list[_Armed] = []
_env_read = False
_lock = threading.Lock()


def install(*faults: Fault) -> None:
    """Arm faults in this process; each counts this process's collectives from now on."""
    for f in faults:
        if not isinstance(f, Fault):
            raise TypeError(f"simgpu.faults.install takes Fault objects, got {type(f).__name__}")
    with _lock:
        _load_env_locked()
        _armed.extend(_Armed(f) for f in faults)


def clear() -> None:
    """Disarm every fault of this process (those from SIMGPU_FAULTS too)."""
    global _env_read
    with _lock:
        _env_read = True
        _armed.clear()


def armed() -> list[tuple[Fault, int]]:
    """The faults still waiting to fire in this process, with how many matching collectives each has seen."""
    with _lock:
        _load_env_locked()
        return [(a.fault, a.seen) for a in _armed]


@contextlib.contextmanager
def injected(*faults: Fault) -> Iterator[None]:
    """Arm faults for the body of a with-block (in this process); those that did not fire are disarmed after."""
    install(*faults)
    try:
        yield
    finally:
        with _lock:
            _armed[:] = [a for a in _armed if not any(a.fault is f for f in faults)]


def install_on_rank(ctx: Any, faults: Sequence[Fault]) -> list[str]:
    """For RankPool.run: arm the faults whose rank is this rank (ctx.rank); returns what was armed."""
    mine = [f for f in faults if f.rank == ctx.rank]
    install(*mine)
    return [f.describe() for f in mine]


def clear_on_rank(ctx: Any) -> None:
    """For RankPool.run: disarm every fault on every rank."""
    clear()


def _load_env_locked() -> None:
    global _env_read
    if _env_read:
        return
    _env_read = True
    text = os.environ.get(ENV_VAR, "").strip()
    if text:
        _armed.extend(_Armed(f) for f in from_json(text))


# ----------------------------------------------------------------------------- the hook
def before_collective(group: Any, op: str, args: Sequence[Any]) -> None:
    """Called by the sim backend at the entry of every collective `op` (args: the method's arguments)."""
    if _env_read and not _armed:
        return
    with _lock:
        _load_env_locked()
        if not _armed:
            return
        me = _process_rank(group)
        due = []
        for a in _armed:
            if a.fault.rank != me or (a.fault.op is not None and a.fault.op != op):
                continue
            a.seen += 1
            if a.seen == a.fault.at:
                due.append(a)
        for a in due:
            _armed.remove(a)
    for a in due:
        _fire(a.fault, me, op, args)


def _process_rank(group: Any) -> int:
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank()
    return group.rank()


def _fire(fault: Fault, rank: int, op: str, args: Sequence[Any]) -> None:
    where = f"simgpu fault injected: {fault.describe()} (here: {op}, rank {rank})"
    if fault.action == "delay":
        time.sleep(fault.seconds)
    elif fault.action == "corrupt":
        for t in _inputs(op, args):
            _perturb(t, fault.amount)
    elif fault.action == "raise":
        raise _exception(fault.exc_type, fault.message or where)
    elif fault.action == "kill":
        _note(where)
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # SIGKILL is delivered before this returns
    elif fault.action == "hang":
        _note(where)
        _hang_injected_fault()


def _hang_injected_fault() -> None:
    while True:
        time.sleep(3600)


def _note(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _exception(name: str, message: str) -> BaseException:
    module, _, qualname = name.rpartition(".")
    try:
        cls: Any = importlib.import_module(module or "builtins")
        for part in qualname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError):
        return RuntimeError(f"{message} [exception type {name!r} not found]")
    return cls(message)


def _inputs(op: str, args: Sequence[Any]) -> list[Any]:
    if op in _NO_INPUT or not args:
        return []
    index = 0 if op in _INPUT_FIRST else 1
    return _tensors(args[index]) if len(args) > index else []


def _tensors(obj: Any) -> list[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    return []


def _perturb(t: Any, amount: float | None) -> None:
    """Add `amount` to every element of t in place (1 for integers, 1024.0 otherwise); negate bools."""
    import torch

    if t.numel() == 0:
        return
    with torch.no_grad():
        if t.dtype == torch.bool:
            t.logical_not_()
            return
        integral = not (t.is_floating_point() or t.is_complex())
        delta: Any = (1 if integral else 1024.0) if amount is None else (int(amount) if integral else amount)
        try:
            t.add_(delta)
        except (RuntimeError, TypeError):  # dtypes without CPU arithmetic (fp8, uint16..uint64)
            wide = torch.complex128 if t.is_complex() else torch.float64 if not integral else torch.int64
            t.copy_((t.to(wide) + delta).to(t.dtype))


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"

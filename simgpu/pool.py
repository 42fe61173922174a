"""A warm pool of rank processes: started once, reused for many calls, replaced when it breaks.

Design:
- Rank processes come from a multiprocessing fork server that imported torch once, so a
  pool of N ranks starts in a fraction of a second and never forks the (threaded) controller.
- Every call has a deadline. A crash, a hang past the deadline, or ranks left stuck after
  another rank raised tear the whole pool down (each rank is its own process-group leader,
  killed with its descendants), after every live rank's Python stack has been dumped.
- Each rank runs in its own session with a parent-death signal, so nothing outlives the
  fork server, and the fork server exits when the controller does.
- Rendezvous uses a TCPStore on a kernel-assigned port owned by rank 0: no fixed ports, no files.
- Where the ranks come from is a rank source: forked here (ForkedRanks, the default), or started
  elsewhere by torchrun and connected back (simgpu.attach.AttachedRanks). Calls, deadlines and
  error collection are the same for both.
"""
from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import multiprocessing.spawn as mp_spawn
import os
import secrets
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Protocol

from simgpu import protocol
from simgpu.protocol import RankOutcome
from simgpu.settings import GROUP_SECRET_ENV

_PRELOAD = ["torch", "torch.distributed", "simgpu.rank"]
_WARM_PRELOAD = ["torch", "torch.distributed", "simgpu.backend", "simgpu.rank"]
_context: Any = None


def _forkserver_context(binding: "Binding | None" = None) -> Any:
    """One fork server per controller process; it imports torch and the sim backend once for every rank
    it forks, and the GPU simulation's modules too when the first pool's ranks simulate GPUs (simgpu.rank's
    preload hook freezes the heap after; docs/warm-template.md); only torch under SIMGPU_NO_TEMPLATE=1."""
    global _context
    if _context is None:
        ctx = mp.get_context("forkserver")
        if os.environ.get("SIMGPU_NO_TEMPLATE") == "1":
            ctx.set_forkserver_preload(_PRELOAD)
        elif binding is not None and binding.device == "simulated-cuda":
            ctx.set_forkserver_preload(["torch", "torch.distributed", "simgpu.backend", "simgpu.cuda_sim.preloaded",
                                        "simgpu.rank"])
        else:
            ctx.set_forkserver_preload(_WARM_PRELOAD)
        _context = ctx
    return _context


@contextlib.contextmanager
def _without_main_reimport() -> Any:
    """Start ranks without re-running the controller's __main__ (pytest's, or a script's).

    multiprocessing's fork server re-imports __main__ in every child, as spawn does; the rank
    functions are always importable by module name, so that import is only cost and risk.
    """
    original = mp_spawn.get_preparation_data

    def preparation_data(name: str) -> dict:
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    mp_spawn.get_preparation_data = preparation_data
    try:
        yield
    finally:
        mp_spawn.get_preparation_data = original


@dataclass(frozen=True)
class Binding:
    """What every rank of a pool initialises: the torch.distributed backend and its device.

    backend: name given to init_process_group ("sim", "gloo", "nccl" or a registered name).
    backend_module: imported by every rank before init_process_group (it registers `backend`).
    device: "cpu", or "cuda" to bind rank r to the r-th visible GPU.
    """

    backend: str = "sim"
    backend_module: str | None = None
    device: str = "cpu"
    init_timeout: float = 120.0
    env: tuple[tuple[str, str], ...] = ()


class RankPoolError(RuntimeError):
    """The pool broke (crash, hang, failed start). It has been torn down; the next call starts a new one.

    cause_ranks: the ranks that failed first; collateral_ranks: ranks that were only waiting on them.
    stacks: every live rank's Python stack at the moment the pool was torn down.
    """

    def __init__(
        self,
        kind: str,
        summary: str,
        cause_ranks: list[int],
        collateral_ranks: list[int],
        stacks: dict[int, str],
        outcomes: list[RankOutcome | None],
    ):
        self.kind = kind
        self.summary = summary
        self.cause_ranks = cause_ranks
        self.collateral_ranks = collateral_ranks
        self.stacks = stacks
        self.outcomes = outcomes
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [f"rank pool {self.kind}: {self.summary}"]
        lines.append(f"  cause: rank(s) {self.cause_ranks}; collateral: rank(s) {self.collateral_ranks}")
        for out in self.outcomes:
            if out is not None and not out.ok:
                lines.append(f"  rank {out.rank} raised {out.error_type}: {out.error}")
                if out.traceback:
                    lines.extend("    " + ln for ln in out.traceback.rstrip().splitlines()[-12:])
        for rank, stack in sorted(self.stacks.items()):
            lines.append(f"  --- python stack of rank {rank} ---")
            lines.extend("    " + ln for ln in stack.rstrip().splitlines()[:40])
        return "\n".join(lines)


@dataclass
class _Rank:
    rank: int
    process: Any  # a handle: LocalProcess here, or a rank source's own (see LocalProcess for the methods)
    conn: Connection
    diag: Connection


class LocalProcess:
    """Handle of a rank forked on this host: the pool waits on, signals and kills it by pid."""

    stack_wait = 0.3  # seconds for faulthandler's stack to arrive after request_stack()

    def __init__(self, process: Any):
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    def sentinels(self) -> list[Any]:
        return [self.process.sentinel]

    def is_alive(self) -> bool:
        """Alive and not a zombie: the fork server reports an exit status moments after the exit itself."""
        return self.process.is_alive() and not is_zombie(self.process.pid)

    def join(self, timeout: float) -> None:
        self.process.join(timeout)

    def exit_note(self) -> str:
        return _exit_note(self.process)

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode

    def request_stack(self) -> None:
        """faulthandler (registered on SIGUSR1 by the rank) writes every thread's stack to the diag pipe."""
        try:
            os.kill(self.process.pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        _kill_tree(self.process.pid)
        self.process.join(5.0)


class RankSource(Protocol):
    """Where a pool's ranks come from: launch() hands over connected ranks, handshake() gets them to init."""

    def launch(self, world_size: int, binding: Binding) -> list[_Rank]: ...

    def handshake(self, ranks: list[_Rank], binding: Binding, expect: Callable[[int, str, float], Any]) -> None: ...


class ForkedRanks:
    """The default rank source: rank processes forked here from the fork server."""

    def launch(self, world_size: int, binding: Binding) -> list[_Rank]:
        from simgpu import rank as rank_module

        ctx = _forkserver_context(binding)
        ranks: list[_Rank] = []
        try:
            for r in range(world_size):
                parent, child = ctx.Pipe(duplex=True)
                diag_r, diag_w = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=rank_module.rank_main,
                    args=(r, world_size, binding, child, diag_w),
                    name=f"simgpu-rank{r}",
                    daemon=True,
                )
                with _without_main_reimport():
                    proc.start()
                child.close()
                diag_w.close()
                ranks.append(_Rank(r, LocalProcess(proc), parent, diag_r))
        except BaseException:
            for rk in ranks:
                rk.process.kill()
            raise
        return ranks

    def handshake(self, ranks: list[_Rank], binding: Binding, expect: Callable[[int, str, float], Any]) -> None:
        """Rank 0 owns the TCPStore on a kernel-assigned port; pass its port to the others."""
        port = expect(0, "store_port", binding.init_timeout)
        for rk in ranks[1:]:
            rk.conn.send(("store_port", port))


class RankPool:
    """N rank processes with an initialised process group, ready to run functions.

    `run(fn, *args)` calls `fn(ctx, *args)` on every rank (fn must be importable by name) and
    returns every rank's RankOutcome. Ranks that raise are reported, not fatal (unless the error
    poisons the process group: then the ranks are replaced before the next call); a crash or
    hang raises RankPoolError after the pool has been killed. A rank that returns with operations
    still pending (sim backend) fails the call and the ranks are replaced (`_quiesce`).
    source: where the ranks come from: forked here (default), or simgpu.attach.AttachedRanks
    for ranks that torchrun started on any number of hosts.
    """

    def __init__(self, world_size: int, binding: Binding = Binding(), *, timeout: float = 60.0,
                 straggler_grace: float = 5.0, source: RankSource | None = None, quiesce_grace: float = 5.0):
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        from simgpu import settings

        settings.positive_seconds("RankPool timeout", timeout)
        settings.positive_seconds("RankPool straggler_grace", straggler_grace)
        settings.positive_seconds("RankPool quiesce_grace", quiesce_grace)
        settings.positive_seconds("Binding init_timeout", binding.init_timeout)
        settings.check_environment({**os.environ, **dict(binding.env)}, world_size,  # what every rank will read
                                   f"a pool of {world_size}")
        self.world_size = world_size
        self.binding = binding
        self.timeout = timeout
        self.straggler_grace = straggler_grace
        self.quiesce_grace = quiesce_grace  # seconds a rank's pending ops get to end once every rank returned
        self.source: RankSource = source if source is not None else ForkedRanks()
        self._ranks: list[_Rank] = []
        self.starts = 0
        self.calls = 0
        self._last_call = "no call yet"

    # ----------------------------------------------------------------- lifecycle
    @property
    def alive(self) -> bool:
        return bool(self._ranks)

    def start(self) -> None:
        """Get the ranks from the source and initialise their process group (bounded by binding.init_timeout)."""
        if self._ranks:
            return
        # a fresh secret per start: the ranks sign their strict-check records with it (simgpu.strict);
        # the strict deadline below the call's, so a hung rank is named by the ranks that waited for it
        from simgpu import settings

        env = [(GROUP_SECRET_ENV, secrets.token_hex(16))]
        strict_timeout = settings.strict_deadline_below(self.timeout, {**os.environ, **dict(self.binding.env)})
        if strict_timeout is not None:
            env.append((settings.STRICT_TIMEOUT_ENV, strict_timeout))
        binding = dataclasses.replace(self.binding, env=(*env, *self.binding.env))
        try:
            self._ranks = self.source.launch(self.world_size, binding)
            self.source.handshake(self._ranks, binding, self._expect)
            self._collect_ready()
        except BaseException:
            self.close(force=True)
            raise
        self.starts += 1

    def _expect(self, rank: int, tag: str, timeout: float) -> Any:
        rk = self._ranks[rank]
        ready = wait([rk.conn, *rk.process.sentinels()], timeout)
        msg = _recv_or_none(rk.conn) if rk.conn in ready else None
        if msg is not None:
            if msg[0] == tag:
                return msg[1]
            if msg[0] == "init_error":
                self._start_failed(f"rank {rank} failed to initialise backend {self.binding.backend!r}: {msg[1]}",
                                   [rank], msg[2])
        if ready:
            rk.process.join(1.0)
            self._start_failed(f"rank {rank} died during start-up ({rk.process.exit_note()})", [rank], None)
        self._start_failed(f"rank {rank} did not start within {timeout:.0f}s", [rank], None)

    def _collect_ready(self) -> None:
        pending = {rk.conn: rk for rk in self._ranks}
        deadline = time.monotonic() + self.binding.init_timeout
        while pending:
            left = deadline - time.monotonic()
            ready = wait(list(pending) + [s for rk in pending.values() for s in rk.process.sentinels()], max(left, 0))
            if not ready:
                self._start_failed(
                    f"ranks {sorted(rk.rank for rk in pending.values())} did not finish init_process_group"
                    f" within {self.binding.init_timeout:.0f}s", sorted(rk.rank for rk in pending.values()), None)
            for conn in [c for c in ready if c in pending]:
                rk = pending.pop(conn)
                msg = _recv_or_none(conn)
                if msg is None:
                    self._start_failed(f"rank {rk.rank} died during init_process_group", [rk.rank], None)
                if msg[0] == "init_error":
                    self._start_failed(
                        f"rank {rk.rank} failed to initialise backend {self.binding.backend!r}: {msg[1]}",
                        [rk.rank], msg[2])
            for rk in list(pending.values()):
                if any(s in ready for s in rk.process.sentinels()) and not rk.conn.poll():
                    self._start_failed(f"rank {rk.rank} died during init_process_group"
                                       f" ({rk.process.exit_note()})", [rk.rank], None)

    def _start_failed(self, summary: str, cause: list[int], tb: str | None) -> None:
        stacks = self._dump_stacks([rk for rk in self._ranks if rk.rank not in cause])
        outcomes: list[RankOutcome | None] = [None] * self.world_size
        if tb:
            outcomes[cause[0]] = RankOutcome(cause[0], False, error_type="InitError", error=summary, traceback=tb)
        self.close(force=True)
        others = [r for r in range(self.world_size) if r not in cause]
        raise RankPoolError("start failure", summary, cause, others, stacks, outcomes)

    def close(self, force: bool = False) -> None:
        """Stop every rank: politely (destroy_process_group) unless force, then kill what is left.

        A polite close of ranks one of which died after its last answer (or exits with an error
        while closing) raises RankPoolError after everything is stopped: the last call's success
        was not the whole story.
        """
        ranks, self._ranks = self._ranks, []
        dead: list[_Rank] = []
        # what the ranks started, read while they live: a rank that exits politely leaves its children to init
        started = [pid for rk in ranks if isinstance(rk.process, LocalProcess) for pid in descendants(rk.process.pid)]
        if not force:
            dead = [rk for rk in ranks if not rk.process.is_alive()]
            for rk in ranks:
                try:
                    rk.conn.send(("close",))
                except OSError:
                    pass
            deadline = time.monotonic() + 5.0
            for rk in ranks:
                rk.process.join(max(deadline - time.monotonic(), 0))
            dead += [rk for rk in ranks if rk not in dead and getattr(rk.process, "exitcode", 0) not in (0, None)]
        for rk in ranks:
            rk.process.kill()
            rk.conn.close()
            rk.diag.close()
        _kill_pids(started)
        if dead:
            notes = ", ".join(f"rank {rk.rank} {rk.process.exit_note()}" for rk in sorted(dead, key=lambda r: r.rank))
            raise RankPoolError("crash", f"{notes} after answering {self._last_call} (found when the pool closed)",
                                sorted(rk.rank for rk in dead),
                                sorted(set(range(self.world_size)) - {rk.rank for rk in dead}), {},
                                [None] * self.world_size)

    def __enter__(self) -> "RankPool":
        self.start()
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.close(force=True)  # the exception on its way out says what went wrong

    def pids(self) -> list[int]:
        return [rk.process.pid for rk in self._ranks]

    # ----------------------------------------------------------------- calls
    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None,
            label: str | None = None) -> list[RankOutcome]:
        """Run fn(ctx, *args) on every rank; same args everywhere (ranks pick their part by ctx.rank).

        label: how messages name the call (default fn's module.qualname)."""
        return self.run_per_rank(fn, [args] * self.world_size, timeout=timeout, label=label)

    def run_per_rank(self, fn: Callable[..., Any], per_rank_args: list[tuple],
                     timeout: float | None = None, label: str | None = None) -> list[RankOutcome]:
        """Run fn(ctx, *per_rank_args[r]) on rank r, for every rank, under one deadline.

        Every call is either read in full (one reply per rank, tagged with this call's number) or,
        when anything interrupts it (a signal, KeyboardInterrupt, pytest-timeout), the ranks are torn
        down before the exception goes on: a later call never reads an earlier call's replies.
        """
        if len(per_rank_args) != self.world_size:
            raise ValueError(f"per_rank_args has {len(per_rank_args)} entries for {self.world_size} ranks")
        payloads = protocol.payloads(fn, per_rank_args)  # an unpicklable argument fails here, before anything is sent
        self.start()
        self.check_alive()
        self.calls += 1
        self._last_call = f"call #{self.calls} ({label or protocol.name_of(fn)})"
        timeout = self.timeout if timeout is None else timeout
        try:
            outcomes = self._exchange(self.calls, payloads, timeout)
            self._check_alive_after(outcomes)
            self._quiesce(self.calls, outcomes)
        except RankPoolError:
            raise  # the pool was torn down by _break
        except BaseException:
            self.close(force=True)  # interrupted mid-call: replies may still be queued; never reuse these ranks
            raise
        if any(o is not None and o.poisoned for o in outcomes):
            self.close(force=True)  # the next call starts fresh ranks with a fresh process group
        return outcomes  # type: ignore[return-value]

    def check_alive(self) -> None:
        """Raise RankPoolError (pool torn down) if a rank died since it last answered: the call it
        answered is named, so the failure points at the code that killed it, not at the next call."""
        dead = [rk for rk in self._ranks if not rk.process.is_alive()]
        if dead:
            for rk in dead:
                rk.process.join(1.0)
            notes = ", ".join(f"rank {rk.rank} {rk.process.exit_note()}" for rk in dead)
            self._break("crash", f"{notes} after answering {self._last_call}", sorted(rk.rank for rk in dead),
                        sorted(set(range(self.world_size)) - {rk.rank for rk in dead}), [None] * self.world_size)

    def _check_alive_after(self, outcomes: list[RankOutcome | None]) -> None:
        """Every rank answered; one that exited right after answering fails this call (not the next)."""
        dead = [rk for rk in self._ranks if not rk.process.is_alive()]
        if dead:
            for rk in dead:
                rk.process.join(1.0)
            notes = ", ".join(f"rank {rk.rank} {rk.process.exit_note()} right after answering" for rk in dead)
            self._break("crash", notes, sorted(rk.rank for rk in dead),
                        sorted(set(range(self.world_size)) - {rk.rank for rk in dead}), outcomes)

    def _quiesce(self, call_id: int, outcomes: list[RankOutcome | None]) -> None:
        """Every call leaves the ranks quiescent, or fails: a rank that answered with collectives or
        point-to-point ops still pending (issued, unmatched or unwaited, queued in the strict check) gets
        `quiesce_grace` seconds, now that every rank has returned, for them to end; those that do not
        fail the call on that rank, naming each op and its line, and mark it poisoned, so that the pool
        is replaced and the next call cannot meet them (issue 28: one test's leftover all_reduce was
        matched by the next test's)."""
        flagged = [rk for rk in self._ranks if outcomes[rk.rank] is not None and outcomes[rk.rank].pending]
        if not flagged:
            return
        for rk in flagged:
            protocol.send(rk.conn, ("quiesce", call_id, self.quiesce_grace))
        pending = {rk.conn: rk for rk in flagged}
        deadline = time.monotonic() + self.quiesce_grace + self.straggler_grace
        while pending:
            ready = wait(list(pending) + [s for rk in pending.values() for s in rk.process.sentinels()],
                         max(deadline - time.monotonic(), 0))
            if not ready:
                self._break("timeout", f"rank(s) {sorted(rk.rank for rk in pending.values())} did not answer whether "
                            f"they were quiescent after {self._last_call}", sorted(rk.rank for rk in pending.values()),
                            [], outcomes)
            for conn in [c for c in list(pending) if c in ready or not pending[c].process.is_alive()]:
                rk = pending.pop(conn)
                reply = protocol.read_reply(conn, rk.rank, call_id) if conn in ready else None
                if reply is None:
                    self._break("crash", f"rank {rk.rank} {rk.process.exit_note()} while checked for pending operations",
                                [rk.rank], [], outcomes)
                left = reply.value if reply.ok else [f"(the check itself failed: {reply.error})"]
                if left:
                    outcomes[rk.rank] = _with_pending(outcomes[rk.rank], left, self.quiesce_grace, self._last_call)

    def _exchange(self, call_id: int, payloads: list[bytes], timeout: float) -> list[RankOutcome | None]:
        """Send the call to every rank, then read exactly one reply from each (or break the pool)."""
        for rk, payload in zip(self._ranks, payloads):
            try:
                protocol.send(rk.conn, ("call", call_id, payload))
            except (BrokenPipeError, ConnectionResetError):
                pass  # seen below as a crash
        outcomes: list[RankOutcome | None] = [None] * self.world_size
        first_error_at: float | None = None
        error_order: list[int] = []
        pending = {rk.conn: rk for rk in self._ranks}
        deadline = time.monotonic() + timeout
        while pending:
            now = time.monotonic()
            limit = deadline if first_error_at is None else min(deadline, first_error_at + self.straggler_grace)
            waitables = list(pending) + [s for rk in pending.values() for s in rk.process.sentinels()]
            ready = wait(waitables, max(limit - now, 0))
            if not ready:
                self._stopped(sorted(rk.rank for rk in pending.values()), error_order, first_error_at,
                              timeout, outcomes)
            dead = []
            for conn in [c for c in ready if c in pending]:
                rk = pending[conn]
                outcome = protocol.read_reply(rk.conn, rk.rank, call_id)
                if outcome is None:
                    dead.append(rk)
                    continue
                del pending[conn]
                outcomes[rk.rank] = outcome
                if not outcome.ok:
                    error_order.append(rk.rank)
                    if first_error_at is None:
                        first_error_at = time.monotonic()
            dead += [rk for rk in pending.values() if rk not in dead
                     and any(s in ready for s in rk.process.sentinels()) and not rk.conn.poll()]
            if dead:
                for rk in dead:
                    rk.process.join(1.0)
                dead_ranks = sorted(rk.rank for rk in dead)
                notes = ", ".join(f"rank {rk.rank} {rk.process.exit_note()}" for rk in dead)
                self._break("crash", notes, error_order + dead_ranks,
                            sorted(set(range(self.world_size)) - set(dead_ranks) - set(error_order)), outcomes)
        return outcomes

    def _stopped(self, waiting: list[int], error_order: list[int], first_error_at: float | None,
                 timeout: float, outcomes: list[RankOutcome | None]) -> None:
        """Some ranks never answered: break the pool, blaming whoever actually stopped the group.

        Ranks that raised a strict CollectiveTimeout name the ranks that never arrived: when those
        are exactly the ones still running, the raisers were only waiting for them (a quiet hang).
        """
        missing = set()
        for rank in error_order:
            out = outcomes[rank]
            if out is None or not out.missing_ranks:
                missing = set()
                break
            missing |= set(out.missing_ranks)
        if first_error_at is not None and not (missing and missing <= set(waiting)):
            self._break("hang after error",
                        f"rank(s) {error_order} raised; rank(s) {waiting} were still running"
                        f" {self.straggler_grace:.1f}s later (probably blocked in a collective)",
                        error_order, waiting, outcomes)
        if first_error_at is not None:
            cause = sorted(missing)
            self._break("timeout", f"rank(s) {cause} never reached the collective that rank(s) {error_order} "
                                   f"waited in until their strict timeout (still running "
                                   f"{self.straggler_grace:.1f}s later)",
                        cause, sorted(set(range(self.world_size)) - set(cause)), outcomes)
        self._break("timeout", f"rank(s) {waiting} did not finish within {timeout:.1f}s",
                    waiting, sorted(set(range(self.world_size)) - set(waiting)), outcomes)

    def _break(self, kind: str, summary: str, cause: list[int], collateral: list[int],
               outcomes: list[RankOutcome | None]) -> None:
        live = [rk for rk in self._ranks if rk.process.is_alive() and outcomes[rk.rank] is None]
        stacks = self._dump_stacks(live)
        self.close(force=True)
        raise RankPoolError(kind, summary, cause, collateral, stacks, outcomes)

    def _dump_stacks(self, ranks: list[_Rank]) -> dict[int, str]:
        """Ask each live rank for its Python stack (faulthandler) and read it back from its diag channel."""
        for rk in ranks:
            rk.process.request_stack()
        time.sleep(max((rk.process.stack_wait for rk in ranks), default=0))
        stacks = {}
        for rk in ranks:
            chunks = []
            fd = rk.diag.fileno()
            os.set_blocking(fd, False)
            while True:
                try:
                    data = os.read(fd, 65536)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                chunks.append(data)
            stacks[rk.rank] = b"".join(chunks).decode(errors="replace") or "(no stack: rank did not answer)"
        return stacks


class UnfinishedOperations(RuntimeError):
    """error_type of a rank that returned from a call with operations still pending (RankPool._quiesce)."""


def _with_pending(out: RankOutcome, left: list[str], grace: float, call: str) -> RankOutcome:
    """The rank's outcome of a call that left `left` pending: failed, poisoned (the pool is replaced)."""
    ops = "; ".join(left)
    text = (f"rank {out.rank} left {len(left)} operation(s) pending {grace:g}s after every rank returned from "
            f"{call}: {ops} (issued and never completed: no peer made the matching call, or it was never waited "
            f"for); the ranks are replaced so that the next call starts quiescent")
    if out.ok:
        return dataclasses.replace(out, ok=False, value=None, error_type=f"{__name__}.{UnfinishedOperations.__name__}",
                                   error=text, traceback="", poisoned=True)
    return dataclasses.replace(out, error=f"{out.error}\n{text}", poisoned=True)


def _recv_or_none(conn: Connection) -> Any:
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid, from /proc/<pid>/task/*/children (empty where /proc has none)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _kill_pids(pids: list[int]) -> None:
    for pid in pids:
        if not is_zombie(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def is_zombie(pid: int) -> bool:
    """True when `pid` has exited and awaits its parent's wait() (Linux /proc; elsewhere: never known)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def _exit_note(proc: Any) -> str:
    code = proc.exitcode
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _kill_tree(pid: int) -> None:
    """Kill the rank's descendants (those in sessions of their own too: the rank is their subreaper,
    simgpu.rank), its whole process group (it is a session leader), then the rank itself."""
    _kill_pids(descendants(pid))
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass

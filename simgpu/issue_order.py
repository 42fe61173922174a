"""A group's collectives start on gloo in the order they were issued, each once its strict check passed,
on a thread of the group's own, so that issuing a collective does not wait for the other ranks.

On NCCL, `dist.all_gather_into_tensor(..., async_op=True)` returns at once and the program computes
while the collective waits for its peers; FSDP's prefetching, DDP's bucketed all-reduces and tensor
parallel overlap rest on that. The strict check must see every rank's call before the data moves
(a mismatched call would hang gloo or mix up buffers), and it waits for the slowest rank. Done at the
call, that wait turned every asynchronous collective into a barrier at its issue point (FSDP2 on 4
ranks: 1.90x a plain CPU run, against 1.34x with the check off). Here the call posts its descriptor
and returns a handle; the group's issuer thread waits for the other ranks' descriptors, compares
them, and only then starts the gloo operation, one call after another in issue order (gloo pairs a
group's collectives by the order they are started). A disagreement is raised by the handle's wait(),
which a synchronous call runs before it returns: a mismatched `dist.all_reduce(t)` still fails in
the call, and an asynchronous one where the program waits for it, as NCCL's would hang there.
"""
from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import time
import weakref
from datetime import timedelta
from typing import Any, Callable, ContextManager

import torch
import torch.distributed as dist

Start = Callable[[], dist.Work]
_STOP = object()
_DRAIN_DEFAULT = 300.0  # seconds an issuer may take to finish (shutdown, exit) when its group gives no timeout
_LIVE: "weakref.WeakSet[Issuer]" = weakref.WeakSet()
_ON_ISSUER = threading.local()  # .active is set on issuer threads


def _off_the_issuer(complete: Callable[[], None]) -> None:
    """Complete a program's future here, unless this is an issuer thread: there, on a thread of its own.
    Completing a future runs the program's callbacks (DDP comm hooks; PowerSGD's issues an all_reduce and
    waits for it), and only the issuer can start that all_reduce: run on it, the callback waits for itself."""
    if getattr(_ON_ISSUER, "active", False):
        threading.Thread(target=complete, name="simgpu-future-callbacks", daemon=True).start()
    else:
        complete()


class Deferred:
    """The handle of a collective whose gloo operation starts once its check has passed.

    It answers what SimWork asks of a gloo Work (wait, is_completed, get_future, _source_rank); the
    check's error, if any, is raised by each of them that needs the operation.
    """

    def __init__(self) -> None:
        self._settled = threading.Event()
        self._lock = threading.Lock()
        self._inner: dist.Work | None = None
        self._error: BaseException | None = None
        self._on_settled: list[Callable[[], None]] = []

    def _settle(self, inner: dist.Work | None, error: BaseException | None) -> None:
        with self._lock:
            self._inner, self._error = inner, error
            callbacks, self._on_settled = self._on_settled, []
            self._settled.set()
        for callback in callbacks:
            callback()

    def settled(self, timeout: float | None = None) -> bool:
        """Whether the check has been settled (the operation started, or failed), waiting up to `timeout` s."""
        return self._settled.wait(timeout)

    def _work(self) -> dist.Work:
        """The started gloo operation, once the check has passed (its error raised otherwise)."""
        self._settled.wait()  # bounded: the check waits at most the strict deadline
        if self._error is not None:
            raise self._error
        assert self._inner is not None
        return self._inner

    def wait(self, timeout: timedelta | None = None) -> bool:
        work = self._work()
        return work.wait() if timeout is None else work.wait(timeout)

    def is_completed(self) -> bool:
        if not self._settled.is_set():
            return False
        return self._error is not None or self._work().is_completed()

    def _source_rank(self) -> int:
        return self._work()._source_rank()

    def finish_started(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the gloo operation, if the check passed and it started; its error,
        if any, is left to the program's own wait()."""
        if self._settled.is_set() and self._inner is not None and not self._inner.is_completed():
            with contextlib.suppress(Exception):
                self._inner.wait(timedelta(seconds=timeout))

    def get_future(self) -> torch.futures.Future:
        """A future that completes with the gloo operation's (or fails with the check's error)."""
        future: torch.futures.Future = torch.futures.Future()

        def chain() -> None:
            if self._error is not None:
                error = self._error
                _off_the_issuer(lambda: future.set_exception(error))
                return
            assert self._inner is not None

            def complete(done: torch.futures.Future) -> None:
                try:
                    future.set_result(done.value())
                except Exception as exc:  # noqa: BLE001 - handed to the future's waiter
                    future.set_exception(exc)
            # an operation already finished runs this at once, here: on the issuer when the check just passed
            self._inner.get_future().add_done_callback(lambda done: _off_the_issuer(lambda: complete(done)))

        with self._lock:
            if not self._settled.is_set():
                self._on_settled.append(chain)
                return future
        chain()
        return future


class Issuer:
    """Starts a group's collectives in issue order, each after its strict check (see the module docstring).

    settle(ticket) waits for the group's descriptors of one call and raises on any disagreement;
    guard() is entered around each start (the simulation's own tensors are plumbing there); after_start(ticket),
    if given, runs once a checked call has started (housekeeping that need not delay the start).
    """

    def __init__(self, settle: Callable[[Any], Any], name: str,
                 guard: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
                 drain_seconds: float = _DRAIN_DEFAULT,
                 after_start: Callable[[Any], None] | None = None) -> None:
        self._settle = settle
        self._after_start = after_start
        self._drain_seconds = drain_seconds
        self._guard = guard
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._started: "weakref.WeakSet[Deferred]" = weakref.WeakSet()  # handles whose gloo op may still run

    def submit(self, ticket: Any, start: Start) -> dist.Work | Deferred:
        """Start now when there is nothing to check and nothing queued; else queue it behind the others."""
        with self._lock:
            if ticket is None and self._pending == 0:
                queued = None
            else:
                queued = Deferred()
                self._pending += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                    _LIVE.add(self)
                # the issuing thread's inference mode: gloo runs an op under the state of the thread that
                # starts it, and writing into an inference tensor outside inference mode is refused
                self._queue.put((ticket, start, queued, torch.is_inference_mode_enabled()))
        if queued is None:
            return start()
        return queued

    def stop(self, wait: float = 0.0) -> None:
        """End the thread once what is queued has started (the group is shut down, or the process exits),
        waiting up to `wait` seconds for it."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(_STOP)
        if thread is not None and wait > 0:
            thread.join(wait)

    def finish(self) -> None:
        """Start what is queued and wait for the gloo operations started here to end, as NCCL's comm destroy
        and a process's last kernels do: a rank that shuts its group down or exits right after issuing its
        last collective (funcol's all_reduce that only rank 0 reads) still takes part in it, and no gloo
        operation is in flight when the process goes. Bounded by the group's timeout: a check that cannot
        pass ends at the strict deadline, a started operation whose peer died fails at once."""
        deadline = time.monotonic() + self._drain_seconds
        self.stop(self._drain_seconds)
        for handle in list(self._started):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            handle.finish_started(left)

    def _run(self) -> None:
        _ON_ISSUER.active = True
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            ticket, start, handle, inference = item
            inner, error = None, None
            try:
                if ticket is not None:
                    self._settle(ticket)
                with self._guard(), torch.inference_mode(inference):
                    inner = start()
            except BaseException as exc:  # noqa: BLE001 - raised by the handle's wait()
                error = exc
            item = start = None  # the operation's closure holds its tensors: see below
            with self._lock:
                self._pending -= 1
            if inner is not None:
                self._started.add(handle)
            handle._settle(inner, error)
            handle = inner = None
            if error is None and ticket is not None and self._after_start is not None:
                try:
                    self._after_start(ticket)
                except Exception:  # noqa: BLE001 - housekeeping: a store that fails here fails the next check, which says so
                    pass
            # none of this item is kept until the next: the operation's closure, its gloo work and its handle
            # hold its tensors, which on CUDA are freed once the program drops them (a state-dict broadcast's
            # full weights stayed allocated)
            ticket = error = None


@atexit.register
def _stop_all() -> None:
    """Let every issuer finish before the interpreter shuts down: its queued collectives started and its
    gloo operations ended (see Issuer.finish). A daemon thread inside a C++ call when Python finalizes
    is unwound by force, which C++ turns into std::terminate (SIGABRT), and a gloo operation still in
    flight then aborts the process the same way."""
    for issuer in list(_LIVE):
        issuer.finish()

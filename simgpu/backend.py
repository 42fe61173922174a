"""The "sim" torch.distributed backend: gloo moves the bytes, NCCL's rules decide what is allowed.

Importing this module registers the backend (`dist.init_process_group("sim", ...)`). Each process
group is a `SimProcessGroup` (a Python `ProcessGroup`) wrapping a real `ProcessGroupGloo` bound to
loopback. Every call is, in order:

1. checked locally the way ProcessGroupNCCL checks it (simgpu.nccl_rules): same exception types,
   messages that start with NCCL's wording;
2. checked across ranks (simgpu.strict): all ranks must make the same call, else every rank raises
   CollectiveMismatch at once instead of hanging;
3. run on gloo, emulating NCCL where gloo differs: fp8 reductions (gloo rejects fp8), integer AVG
   (truncating division), float AVG and PREMUL_SUM (pre-multiplied sums), bool SUM as OR, reduce
   leaving non-root tensors unchanged, uneven all_gather / reduce_scatter, stacked outputs for
   all_gather_into_tensor (NCCL checks numel only), non-contiguous point-to-point tensors, and
   point-to-point matching: ProcessGroupNCCL ignores tags, so the k-th recv from a peer gets the k-th
   send from it whatever the tags (every message travels on gloo tag 0, which gloo matches in order).
   What NCCL does not implement is refused the same way: recv/irecv without a source and
   all_gather_coalesced raise NotImplementedError.

Data-moving ops travel as raw bytes (uint8 views), so any dtype NCCL accepts moves through gloo.
Tensors that NCCL takes in any layout (send/recv and the list all_to_all, where it only warns;
all_gather's output list and reduce_scatter's input list, which it copies) are staged through
contiguous buffers: values move in logical order, which is what NCCL gives when both ends have the
same layout (NCCL moves memory; mixing layouts there is "user responsibility").
Ops with a fix-up step return a `SimWork` whose wait() runs the fix-up after gloo finishes, so
async_op=True keeps working; results are only defined after wait(), as on NCCL.
"""
from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import gc
import os
import secrets
import sys
import threading
import weakref
from datetime import timedelta
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)

from simgpu import collective_echo, collective_profiling, comm_log, faults, gloo_listener
from simgpu import nccl_rules as rules
from simgpu.cuda_sim import graphs, placement, plan, plan_host, stream_clocks
from simgpu.cuda_sim.tensors import suspended
from simgpu.p2p_check import P2PChecker
from simgpu.p2p_pairs import PairRendezvous
from simgpu.issue_order import Issuer
from simgpu.strict import Call, StrictChecker
from simgpu.strict import call_site as strict_call_site
from simgpu.settings import GROUP_SECRET_ENV, SIM_INTERFACE_ENV

BACKEND_NAME = "sim"
Tensor = torch.Tensor

__all__ = ["BACKEND_NAME", "SimProcessGroup", "SimWork", "create_sim_process_group", "register"]


# ----------------------------------------------------------------------------- work handles
# A Python Work handed to C++ (a process group's result in torch 2.4, the work DDP's reducer keeps
# for Join, which it waits on and then asks for result()) is held there by its C++ half only: once
# the Python object is collected, C++ finds no override, and wait() waits forever on the base class,
# result() and getFuture() raise "not implemented". So a work is kept alive here until it completes,
# and then, if C++ may hold it, among the few most recently completed (a C++ caller reads the result
# right after wait). Not longer: each holds its collective's tensors, and keeping the 4096 most recent
# works kept FSDP2's all-gather buffers of thousands of calls, growing a rank's memory by the model every
# step. A work that nobody reads after its wait (_dropped_once_waited) is not kept: on CUDA its buffers
# are freed then, and keeping it kept 16 collectives' tensors allocated (16 full weights after a
# state-dict broadcast, DDP's buckets, FSDP2's all-gathers).
_PENDING_WORKS: collections.OrderedDict = collections.OrderedDict()
_PENDING_BOUND = 4096
_RECENTLY_COMPLETED: collections.deque = collections.deque(maxlen=16)


def _keep_pending(work: "SimWork") -> None:
    _PENDING_WORKS[id(work)] = work
    while len(_PENDING_WORKS) > _PENDING_BOUND:
        _PENDING_WORKS.popitem(last=False)


def unfinished_operations() -> list[str]:
    """This process's collectives and point-to-point ops that are still pending on any group: issued and
    not ended (no peer matched them, or nobody waited and they are still running), named by call and
    site. A warm rank must have none between two calls, or the next call meets them (simgpu.rank)."""
    return [work.what for work in list(_PENDING_WORKS.values()) if work.unfinished()]


_STRONG_COMPLETED = 2  # the newest completed works keep their outputs as they are


def _keep_completed(work: "SimWork", again: bool = False) -> None:
    """Keep a completed work alive (C++ may still call its overrides) without keeping its tensors: a GPU
    frees a collective's buffers once it has completed and its caller has let go of them (FSDP2's
    all-gather and reduce-scatter buffers, DDP's broadcast and first buckets). Holding them here kept
    up to 16 collectives' buffers alive and put 4-8 bytes a parameter on DDP's and FSDP2's peaks. A work
    nobody can read after its wait (cpp_may_hold False) is not kept at all.

    A kept work older than the newest few holds its outputs weakly once only simgpu holds it and its
    result is not still to be read (SimWork.unread: completed by polling, before any reader waited):
    no Python caller can ask for result() any more, and a C++ caller holds the tensors it passed in (so
    the weak references resolve). Each completion looks at every older kept work, not only the one it
    pushed past the newest few: one that was still held or unread then is let go of once it no longer is.
    again: a work completed by polling is waited for now, and kept as if it had completed now."""
    if again:
        with contextlib.suppress(ValueError):  # pushed out of the deque meanwhile
            _RECENTLY_COMPLETED.remove(work)
    if work.cpp_may_hold:
        _RECENTLY_COMPLETED.append(work)
    _PENDING_WORKS.pop(id(work), None)
    for i in range(len(_RECENTLY_COMPLETED) - _STRONG_COMPLETED):
        try:
            older = _RECENTLY_COMPLETED[i]
        except IndexError:  # another thread's completion changed the deque
            break
        # held by the deque, `older` and getrefcount's argument only
        if older.holds_outputs and not older.unread and sys.getrefcount(older) <= 3:
            older.hold_outputs_weakly()


_SIMGPU_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PYTHON_API = os.path.join("torch", "distributed", "distributed_c10d.py")
_OP_CALL = os.path.join("torch", "_ops.py")


def _first_caller_outside_simgpu() -> Any:
    """The innermost frame of the program or of torch that led here (None: called from C++ alone)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_SIMGPU_DIR):
        frame = frame.f_back
    return frame


def _waited_by_python() -> bool:
    """Whether wait() was called by Python code (outside simgpu) that holds the work, rather than from C++
    (DDP's reducer waits in backward, then reads the result): the calling frame's code calls a `wait`."""
    frame = _first_caller_outside_simgpu()
    return frame is not None and "wait" in frame.f_code.co_names


def _dropped_once_waited() -> bool:
    """Whether nobody reads the work after its wait: torch.distributed's Python API called with
    async_op=False (it waits and drops the work), or a functional collective's op (its C++ registry waits
    in wait_tensor and drops it). Read from the first caller outside simgpu; anything else (a handle given
    to the program, which may hand it to C++ as DDP's forward does; DDP's reducer in C++) may be read."""
    frame = _first_caller_outside_simgpu()
    if frame is not None and frame.f_code.co_filename.endswith(_OP_CALL):
        return True
    while frame is not None and frame.f_code.co_filename.endswith(_PYTHON_API):  # the API and its helpers
        if "async_op" in frame.f_code.co_varnames:
            return not frame.f_locals.get("async_op", True)
        frame = frame.f_back
    return False


class SimWork(dist.Work):
    """A gloo Work plus the step that makes its result NCCL's (run once, on wait or completion)."""

    def __init__(self, inner: dist.Work | None, outputs: Sequence[Tensor],
                 finish: Callable[[], None] | None = None):
        super().__init__()
        self._inner = inner
        self._outputs: list[Any] = list(outputs)  # after completion, weak references where others hold them
        self._finish = finish
        self._done = False
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self.what = "an operation"  # how unfinished_operations() names it: the call and its site
        self.cpp_may_hold = not _dropped_once_waited()
        self.unread = False  # completed before anyone waited for it (polled), and result() not asked for since
        self.holds_outputs = True  # False once hold_outputs_weakly() let go of them all
        self.plan_end: float | None = None  # under a plan: when the collective ends on its stream (plan.py)
        self.gpu_end = stream_clocks.collective_issued()  # when it ends on its stream (None: no clock is ahead)
        self.host_blocks = False  # a barrier: wait() holds the host until then, as NCCL's barrier does
        _keep_pending(self)

    def _complete(self, reader: bool = True) -> None:
        """Run the fix-up once. reader: a waiter (wait(), or the future's callback, which takes the result)
        is at hand to read the result now; False: the program polled is_completed(), and whoever reads the
        result (DDP's reducer reads Join's all-reduce in backward) waits for it later."""
        with self._lock:
            if not self._done:
                self._done = True
                try:
                    if self._finish is not None:
                        self._finish()
                except BaseException as exc:  # noqa: BLE001 - re-raised by every wait()
                    self._error = exc
                self._finish = None  # its closure holds the collective's inputs and buffers
                self._let_go_of_transport()
                if reader and self.cpp_may_hold:
                    self._hold_shared_outputs_weakly()
                self.unread = not reader
                _keep_completed(self)
            elif reader and self.unread:  # polled before; its reader waits now and reads right after, as the
                self.unread = False       # waiter of a work that completes at its wait does: kept as newly
                _keep_completed(self, again=True)  # completed (or not at all: a Python waiter holds it)
        if self._error is not None:
            raise self._error

    def wait(self, timeout: timedelta | None = None) -> bool:
        with plan_host.SIM:
            return self._wait(timeout)

    def _wait(self, timeout: timedelta | None, reader: bool = True) -> bool:
        if self._inner is not None:
            self._inner.wait() if timeout is None else self._inner.wait(timeout)
        if self.cpp_may_hold and _waited_by_python():  # the waiter holds the handle (FSDP2's reduce-scatter),
            self.cpp_may_hold = False                  # so nothing needs to keep it: its buffers go with it
        self._complete(reader)
        if self.plan_end is not None and plan.RECORDER is not None:
            plan.RECORDER.waited(self.plan_end)
        stream_clocks.collective_waited(self.gpu_end, self.host_blocks)
        return True

    def is_completed(self) -> bool:
        if self._done:
            return True
        if self._inner is None or self._inner.is_completed():
            try:
                with plan_host.SIM:
                    self._wait(None, reader=False)
            except BaseException:  # noqa: BLE001 - reported by wait()
                pass
            return True
        return False

    def is_success(self) -> bool:
        return self.is_completed() and self._error is None

    def exception(self) -> Any:
        return self._error

    def result(self) -> list[Tensor]:
        self.unread = False
        resolved = (o() if isinstance(o, weakref.ref) else o for o in self._outputs)
        return [t for t in resolved if t is not None]

    def _hold_shared_outputs_weakly(self) -> None:
        """Completed by a waiter C++ may hold (it reads the result right after): an output someone else holds
        (C++'s own tensor: DDP's broadcast buffer and buckets) is held weakly, so it is freed when they let
        go, as a GPU frees a finished collective's buffer; one only this work holds stays for result().

        Only then. Whoever else holds an output at completion may let go of it before a later reader reads:
        the frame of torch's Join.notify_join_context holds `ones` until it returns the work that DDP's
        reducer reads in backward, so a work completed while it ran (polled) is not the waiter's, and the
        result came back empty. The transport's buffers (_raw) alias the outputs' memory without holding
        the tensors, so gloo's thread, which lets go of a finished operation a moment after its waiter
        returns, is not counted. A work nobody keeps (cpp_may_hold False) holds its outputs strongly: they
        go with it, as a GPU's go with its work."""
        self._outputs = [weakref.ref(o) if isinstance(o, Tensor) and sys.getrefcount(o) > 3 else o
                         for o in self._outputs]  # > the list, `o` and getrefcount's argument

    def hold_outputs_weakly(self) -> None:
        """Completed, and only simgpu holds this work: its outputs live as long as their other holders."""
        self._outputs = [weakref.ref(o) if isinstance(o, Tensor) else o for o in self._outputs]
        self.holds_outputs = False

    def _let_go_of_transport(self) -> None:
        """The finished gloo work holds views of the collective's buffers: let go of it (a run with data then
        frees them when a plan, which moves nothing, does), keeping what a recv from any source asks later."""
        inner, self._inner = self._inner, None
        if inner is not None:
            try:
                self._source: int | BaseException = inner._source_rank()
            except Exception as exc:  # noqa: BLE001 - not a recv: asked for, it raises as the work would
                self._source = exc.with_traceback(None)  # its frames would hold the gloo work

    def _source_rank(self) -> int:
        if self._inner is not None:
            return self._inner._source_rank()
        source = getattr(self, "_source", -1)
        if isinstance(source, BaseException):
            raise source
        return source

    def get_future(self) -> torch.futures.Future:
        if self._inner is not None and not self._done:
            try:
                inner_future = self._inner.get_future()
            except RuntimeError:  # gloo's point-to-point works have no future
                inner_future = None
            if inner_future is not None:
                def then(fut: torch.futures.Future) -> list[Tensor]:
                    fut.value()
                    self._complete()
                    return self.result()
                return inner_future.then(then)
        self.wait()
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self.result())
        return fut

    def unfinished(self) -> bool:
        """Its transport operation has not ended (still in the strict check, queued, or moving data),
        and the program has not waited for it; read without waiting, raising, or running the fix-up."""
        if self._done or self._inner is None:
            return False
        try:
            return not self._inner.is_completed()
        except Exception:  # noqa: BLE001 - a failed operation has ended
            return False

    @staticmethod
    def all_of(works: Sequence["SimWork"], outputs: Sequence[Tensor]) -> "SimWork":
        """One handle for several works (the *_coalesced calls)."""
        def wait_all() -> None:
            for work in works:
                work.wait()
        return SimWork(None, outputs, wait_all)


class _SendHandle:
    """A send's transport handle (simgpu.issue_order.Deferred): waiting on it while its recv is not posted
    marks the rank blocked on the peer, and a cycle of such waits raises P2PDeadlock
    (simgpu.p2p_pairs.PairRendezvous.await_recv) instead of hanging. blocked=None: an eager send
    (p2p_pairs.EAGER_SEND_BYTES), which completes for its waiter at once."""

    def __init__(self, deferred: Any, blocked: Callable[[], None] | None):
        self._deferred = deferred
        self._blocked = blocked

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._blocked is None:
            return True
        self._blocked()
        return self._deferred.wait(timeout)

    def is_completed(self) -> bool:
        return self._blocked is None or self._deferred.is_completed()

    def _source_rank(self) -> int:
        return self._deferred._source_rank()

    def get_future(self) -> torch.futures.Future:
        """None, as gloo's point-to-point works: SimWork.get_future then waits and gives a done future."""
        raise RuntimeError("simgpu: a send's work has no future (as gloo's point-to-point works)")

    def finish_started(self, timeout: float) -> None:
        self._deferred.finish_started(timeout)


# ----------------------------------------------------------------------------- tensor helpers
def _any_meta(args: Sequence[Any]) -> bool:
    """Whether a collective's arguments hold a storage-less (plan) tensor."""
    for arg in args:
        if isinstance(arg, Tensor):
            if placement.storage_less(arg):
                return True
        elif isinstance(arg, (list, tuple)) and _any_meta(arg):
            return True
    return False


_PLAN_TOKEN = torch.zeros(1, dtype=torch.uint8)  # what a plan sends for a storage-less tensor: no bytes but one


class _Moved(dist.Work):
    """The finished transfer of a plan's collective: storage-less tensors have no bytes to move."""

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result([])
        return fut


def _raw(t: Tensor) -> Tensor:
    """1-D view of a dense tensor's memory in memory order (what NCCL reads and writes).

    as_strided, not reshape: a one-element tensor can be "contiguous" with stride 0 (expanded).
    Of t detached: the same memory without holding t itself (a view holds its base, which counts as one
    more reference to t's Python object): gloo's worker thread holds a finished operation's buffers a
    moment after its waiter returns, and a completed work that saw t still held then let go of it
    (SimWork._hold_shared_outputs_weakly), emptying a result read later.
    """
    return t.detach().as_strided((t.numel(),), (1,))


def _raw_bytes(t: Tensor) -> Tensor:
    return _raw(t).view(torch.uint8)


def _contiguous(t: Tensor) -> Tensor:
    """t itself if contiguous, else a fresh contiguous buffer of its shape (not filled)."""
    return t if t.is_contiguous() else torch.empty_like(t, memory_format=torch.contiguous_format)


def _dt(t: Tensor) -> str:
    return rules.dtype_name(t.dtype)


def _sizes(ts: Sequence[Tensor]) -> str:
    return "[" + ", ".join(str(t.numel()) for t in ts) + "]"


def _unbytes(buf: Tensor, like: Tensor) -> Tensor:
    """A uint8 slice seen as `like`'s dtype and shape."""
    return buf.view(like.dtype).view(like.shape)


def _summarize(args: Sequence[Any]) -> str:
    """The tensors among a call's arguments, for the strict table: float32[3], [2 x float32[4]]."""
    parts = []
    for arg in args:
        if isinstance(arg, Tensor):
            parts.append(rules.describe(arg))
        elif isinstance(arg, (list, tuple)) and arg and all(isinstance(a, (Tensor, list)) for a in arg):
            inner = _summarize(arg)
            parts.append(f"[{inner}]" if len(arg) <= 3 else f"[{len(arg)} items]")
    return ", ".join(parts)


def _collective(op: str) -> Callable:
    """Decorator: when NCCL's local checks refuse a call, tell the group before raising.

    The other ranks then fail at once with CollectiveMismatch instead of waiting (simgpu.strict).
    Errors after the strict check (from gloo, or the mismatch itself) pass through unchanged.
    """
    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def call(self: "SimProcessGroup", *args: Any, **kwargs: Any) -> Any:
            # in a CUDA graph's capture: recorded whole, to be issued again at each replay
            with plan_host.SIM, graphs.collective(args, kwargs, lambda: _called(self, args, kwargs)):
                return _called(self, args, kwargs)

        def _called(self: "SimProcessGroup", args: tuple, kwargs: dict) -> Any:
            self._local.checked = False
            self._local.ticket = None
            try:
                collective_echo.echo(op, method, self, args, kwargs)  # what NCCL shows the program's dispatch modes
                faults.before_collective(self, op, args)  # injected faults (simgpu.faults); a no-op unless armed
                self._local.described = None
                self._local.no_data = placement._storage_less and _any_meta(args)  # a plan: nothing to move
                with collective_profiling.collective(op, args), suspended():  # NCCL's profiler record; the
                    result = method(self, *args, **kwargs)  # simulator's own tensors are plumbing, not GPU code
                if isinstance(result, SimWork):
                    result.what = self._local.described or op
                self._batched(result)
                if comm_log.ACTIVE is not False:  # SIMGPU_PREDICT: count it for the cost model
                    comm_log.record(op, self.size(), args)
                if plan.RECORDER is not None:
                    end = plan.RECORDER.collective(op, self.size(), args, id(self))
                    if isinstance(result, SimWork):
                        result.plan_end = end  # a plan's timeline: a wait on the default stream holds compute
                return result
            except Exception as exc:
                if not self._local.checked:
                    self._strict.reject(Call(op, f"{op}({_summarize(args)})"), exc)
                raise
        return call
    return decorate


def _point_to_point(kind: str) -> Callable:
    """Decorator: send/recv in the program's profiler as NCCL's (simgpu.collective_profiling)."""
    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def call(self: "SimProcessGroup", tensors: list[Tensor], *args: Any, **kwargs: Any) -> Any:
            named = (v for k, v in kwargs.items() if k in ("dst", "src", "dstRank", "srcRank"))
            peer = args[0] if args else next(named, -1)
            with plan_host.SIM, collective_profiling.point_to_point(kind, self.rank(), peer, tensors):
                return method(self, tensors, *args, **kwargs)
        return call
    return decorate


# ----------------------------------------------------------------------------- process group
class PythonGroupNames:
    """The name and description of a process group written in Python.

    torch keeps a group's name on its registered C++ backends and asks for it by the methods below
    (functional collectives and the C++ registry look groups up by name); a ProcessGroup subclass in
    Python has none of its own, so it keeps them here. Put it before dist.ProcessGroup in the bases."""

    def _set_group_name(self, name: str) -> None:
        self._python_group_name = name

    def _set_group_desc(self, desc: str) -> None:
        self._python_group_desc = desc

    @property
    def group_name(self) -> str:
        return getattr(self, "_python_group_name", "")

    @property
    def group_desc(self) -> str:
        return getattr(self, "_python_group_desc", "")

    setGroupName = _set_group_name  # noqa: N815 - the names torch's C++ calls back
    setGroupDesc = _set_group_desc  # noqa: N815

    def getGroupName(self) -> str:  # noqa: N802
        return self.group_name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self.group_desc


class SimProcessGroup(PythonGroupNames, dist.ProcessGroup):
    """A process group that behaves like ProcessGroupNCCL on CPU ranks (see the module docstring)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "SimProcessGroup":
        """A plan of a sample of ranks (`simgpu run --plan GPU --ranks ...`) makes every group a
        plan_roles.SoloGroup: its collectives complete in the caller, as the other members do not run."""
        if cls is SimProcessGroup and os.environ.get(plan.ENV_RANKS):
            from simgpu.cuda_sim import plan_roles

            cls = plan_roles.SoloGroup
        return super().__new__(cls)

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 devices: Sequence[str] | None = None, strict_timeout: float | None = None):
        super().__init__(rank, size)
        self._gloo = _make_gloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        _agree_on_a_secret_across_hosts(store)
        self._strict = StrictChecker(store, rank, size, label=self._label, default_timeout=strict_timeout,
                                     global_rank=self._global_rank)
        self._pairs = PairRendezvous(store, rank, label=self._label, global_rank=self._global_rank,
                                     signer=self._strict)
        self._p2p = P2PChecker(self._strict, label=self._label, global_rank=self._global_rank)
        self._local = threading.local()  # .checked, .ticket: the current call has posted its strict check
        self._issuer = Issuer(self._strict.settle, name=f"simgpu-issue-{rank}", guard=suspended,
                              drain_seconds=timeout.total_seconds(), after_start=self._strict.tidy)
        self._timeout_s = timeout.total_seconds()
        self._senders: dict[int, Issuer] = {}  # per destination: its sends, in order, each once its recv is posted
        if size > 1:  # the check's store connections, made now rather than at a first call: a rank whose
            self._strict.connect()  # first call is refused must tell the others at once (StrictChecker.reject)
        self._loopback: collections.deque = collections.deque()  # messages this rank sent to itself, in order
        # the device types the group serves, as torch asks them (_device_types, object collectives, DCP,
        # DTensor): an NCCL group's are ("cuda",); default: the host, and simulated GPUs where there are some
        for device in devices or (("cpu", "cuda") if _gpus_simulated() else ("cpu",)):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)
        if hasattr(self, "_set_default_backend"):  # torch >= 2.15 asks a group's default backend (flight recorder)
            self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)

    def _get_backend(self, device: Any) -> Any:
        """torch >= 2.15's batch_isend_irecv asks every ProcessGroup instance (2.13: only an exact
        ProcessGroup) for its backend's supports_coalescing; gloo's says False, so the ops run one by one."""
        return self._gloo

    @property
    def gloo(self) -> dist.ProcessGroupGloo:
        """The gloo group underneath (no NCCL rules, no strict checks)."""
        return self._gloo

    @property
    def strict(self) -> StrictChecker:
        """The cross-rank call check of this group (its sequence number, its timeout state)."""
        return self._strict

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"SimProcessGroup(rank={self.rank()}, size={self.size()})"

    def _label(self) -> str:
        """How messages name this group: 'default group' or "group '1'", with its global ranks."""
        world = dist.distributed_c10d._world
        label = "the default group" if world.default_pg is self else f"group {self.group_name!r}"
        try:
            ranks = dist.get_process_group_ranks(self)
        except Exception:  # noqa: BLE001 - only used in messages
            return label
        return f"{label} (global ranks {ranks})"

    def _global_rank(self, group_rank: int) -> int:
        """A group rank as a global rank, for messages (the group rank itself if torch cannot say)."""
        try:
            return dist.get_global_rank(self, group_rank)
        except Exception:  # noqa: BLE001 - only used in messages
            return group_rank

    def _ctx(self, op: str, arg: str) -> str:
        return f"rank {self.rank()}, {op}() argument '{arg}'"

    def _check(self, op: str, text: str, agree: dict | None = None,
               send: list | None = None, recv: list | None = None) -> None:
        """Post this call to the strict check; its gloo operation starts once every rank's agrees (_launch)."""
        self._local.checked = True
        call = Call(op, text, agree or {}, send, recv)
        self._local.ticket = self._strict.post(call)
        self._local.described = f"{text} at {call.site or strict_call_site()}"

    def _launch(self, start: Callable[[], dist.Work]) -> Any:
        """Start this call's gloo operation once its strict check has passed, in the group's issue
        order (simgpu.issue_order): a handle for SimWork, returned before the other ranks arrive."""
        ticket, self._local.ticket = getattr(self._local, "ticket", None), None
        if getattr(self._local, "no_data", False):
            start = _Moved  # a plan's storage-less tensors: checked across ranks, nothing to move
        return self._issuer.submit(ticket, start)

    def _single(self, tensors: Sequence[Tensor], op: str, unconvertible: bool = False) -> tuple[Tensor, str]:
        """The one tensor of a single-tensor collective, held to NCCL's layout and dtype rules.

        unconvertible: the dtype error is torch::cuda::nccl's RuntimeError (gather), not the TypeError.
        Returns it with the message context that names it ("rank 0, all_reduce() argument 'tensor'").
        """
        t = _one(tensors)
        ctx = self._ctx(op, "tensor")
        rules.check_contiguous(t, ctx)
        (rules.check_dtype_unconvertible if unconvertible else rules.check_dtype)(t, ctx)
        return t, ctx

    def _root(self, root: int, op: str) -> int:
        if not 0 <= root < self.size():
            raise ValueError(f"ProcessGroupNCCL::{op}: invalid root rank: {root}"
                             f"{rules.note(f'rank {self.rank()}, group of {self.size()} ranks')}")
        return root

    def _count(self, items: Sequence[Any], op: str, arg: str) -> None:
        if len(items) != self.size():
            raise ValueError(f"simgpu: {op}() argument '{arg}' has {len(items)} tensors for a group of "
                             f"{self.size()} ranks (rank {self.rank()}; on NCCL: undefined behaviour)")

    # ------------------------------------------------------------------------- reductions
    @_collective("all_reduce")
    def allreduce(self, tensors: list[Tensor], opts: AllreduceOptions = AllreduceOptions()) -> SimWork:
        t, ctx = self._single(tensors, "all_reduce")
        plan = rules.plan_reduction(opts.reduceOp, t.dtype, self.size(), ctx)
        rules.check_fp8_avg(opts.reduceOp, t, self.size())
        op = rules.op_name(opts.reduceOp)
        self._check("all_reduce", f"all_reduce({rules.describe(t)}, op={op})",
                    {"dtype": _dt(t), "numel": t.numel(), "op": op})
        raw = _raw(t)
        buf, aliased = plan.to_wire(raw, "inplace")
        work = self._launch(lambda: self._gloo.allreduce([buf], _opts(AllreduceOptions, reduceOp=plan.gloo_op)))
        return SimWork(work, [t], lambda: plan.from_wire(buf, raw, aliased))

    @_collective("all_reduce_coalesced")
    def allreduce_coalesced(self, tensors: list[Tensor],
                            opts: AllreduceCoalescedOptions = AllreduceCoalescedOptions()) -> SimWork:
        ctx = self._ctx("all_reduce_coalesced", "tensors")
        if not tensors:
            raise ValueError(f"Tensor list must be nonempty{rules.note(ctx)}")
        for i, t in enumerate(tensors):
            rules.check_dense(t, f"{ctx}[{i}]")
            if t.dtype != tensors[0].dtype:
                where = rules.note(f"{ctx}[{i}] is {t.dtype}, [0] is {tensors[0].dtype}")
                raise TypeError(f"Tensors must have identical type{where}")
        rules.check_dtype(tensors[0], ctx)
        plan = rules.plan_reduction(opts.reduceOp, tensors[0].dtype, self.size(), ctx)
        op = rules.op_name(opts.reduceOp)
        self._check("all_reduce_coalesced", f"all_reduce_coalesced({len(tensors)} x {_dt(tensors[0])}, "
                    f"numels {_sizes(tensors)}, op={op})",
                    {"dtype": _dt(tensors[0]), "numels": [t.numel() for t in tensors], "op": op})
        raws = [_raw(t) for t in tensors]
        buf = torch.cat([plan.to_wire(r, "private")[0] for r in raws])
        work = self._launch(lambda: self._gloo.allreduce([buf], _opts(AllreduceOptions, reduceOp=plan.gloo_op)))

        def finish() -> None:
            for raw, part in zip(raws, buf.split([plan.wire_numel(r.numel()) for r in raws])):
                plan.from_wire(part, raw, False)
        return SimWork(work, tensors, finish)

    @_collective("reduce")
    def reduce(self, tensors: list[Tensor], opts: ReduceOptions = ReduceOptions()) -> SimWork:
        tensors = [_reduce_real_view(_one(tensors), opts.reduceOp)]
        t, ctx = self._single(tensors, "reduce")
        plan = rules.plan_reduction(opts.reduceOp, t.dtype, self.size(), ctx)
        rules.check_fp8_avg(opts.reduceOp, t, self.size())
        root = self._root(opts.rootRank, "reduce")
        op = rules.op_name(opts.reduceOp)
        self._check("reduce", f"reduce({rules.describe(t)}, dst={root}, op={op})",
                    {"dtype": _dt(t), "numel": t.numel(), "op": op, "dst": root})
        raw = _raw(t)
        is_root = self.rank() == root
        # NCCL leaves non-root tensors alone; gloo writes partial results into them: give it a copy.
        buf, aliased = plan.to_wire(raw, "inplace" if is_root else "private")
        reduce_opts = _opts(ReduceOptions, reduceOp=plan.gloo_op, rootRank=root)
        work = self._launch(lambda: self._gloo.reduce([buf], reduce_opts))
        return SimWork(work, [t], (lambda: plan.from_wire(buf, raw, aliased)) if is_root else None)

    @_collective("reduce_scatter")
    def reduce_scatter(self, outputs: list[Tensor], input_lists: list[list[Tensor]],
                       opts: ReduceScatterOptions = ReduceScatterOptions()) -> SimWork:
        out = _one(outputs)
        ins = _one(input_lists)
        ctx = self._ctx("reduce_scatter", "output")
        rules.check_contiguous(out, ctx)
        if self.size() == 1:  # [nccl-run] no dtype or reduce-op check: a copy of the input
            self._count(ins, "reduce_scatter", "input_list")
            return self._copy_one(out, ins[0], opts.reduceOp, "reduce_scatter")
        rules.check_dtype(out, ctx)
        plan = rules.plan_reduction(opts.reduceOp, out.dtype, self.size(), ctx)
        self._count(ins, "reduce_scatter", "input_list")
        if ins[self.rank()].numel() != out.numel():
            raise ValueError("Tensor input and output of _reduce_oop must have the same number of elements "
                             + rules.note(f"rank {self.rank()}, reduce_scatter() output has {out.numel()}, "
                                          f"input_list[{self.rank()}] has {ins[self.rank()].numel()}"))
        op = rules.op_name(opts.reduceOp)
        self._check("reduce_scatter", f"reduce_scatter({rules.describe(out)}, input numels {_sizes(ins)}, op={op})",
                    {"dtype": _dt(out), "op": op, "input_numels": [x.numel() for x in ins]})
        width = max(plan.wire_numel(x.numel()) for x in ins)
        stacked = torch.zeros(self.size() * width, dtype=plan.wire_dtype)
        for j, x in enumerate(ins):  # uneven slots padded to the widest (NCCL allows uneven)
            wire = plan.to_wire(x, "readonly")[0]
            stacked[j * width: j * width + wire.numel()].copy_(wire)
        buf = torch.empty(width, dtype=plan.wire_dtype)
        work, gather = self._gloo_reduce_scatter(buf, stacked, plan.gloo_op)
        raw = _raw(out)

        def finish() -> None:
            gather()
            plan.from_wire(buf[: plan.wire_numel(out.numel())], raw, False)
        return SimWork(work, [out], finish)

    @_collective("reduce_scatter_tensor")
    def reduce_scatter_single(self, output: Tensor, input: Tensor,  # noqa: A002 - torch's name
                              opts: ReduceScatterOptions = ReduceScatterOptions()) -> SimWork:
        ctx = self._ctx("reduce_scatter_tensor", "input")
        if self.size() > 1:  # [nccl-run] NCCL reports the dtype or op error of a non-contiguous case
            rules.check_dtype(input, ctx)
            rules.plan_reduction(opts.reduceOp, input.dtype, self.size(), ctx)
        rules.check_contiguous(output, self._ctx("reduce_scatter_tensor", "output"))
        rules.check_contiguous(input, ctx)
        if input.dtype != output.dtype:
            raise TypeError("input tensor must be the same type as the output tensor."
                            + rules.note(f"{ctx} is {input.dtype}, 'output' is {output.dtype}"))
        if input.numel() != output.numel() * self.size():
            raise ValueError("input tensor must be the same size as output size times world size"
                             + rules.note(f"{ctx} has {input.numel()} elements, 'output' {output.numel()}, "
                                          f"world size {self.size()}"))
        if self.size() == 1:  # [nccl-run] no dtype or reduce-op check: a copy of the input
            return self._copy_one(output, input.view(output.shape), opts.reduceOp, "reduce_scatter_tensor")
        rules.check_dtype(input, ctx)
        plan = rules.plan_reduction(opts.reduceOp, input.dtype, self.size(), ctx)
        op = rules.op_name(opts.reduceOp)
        self._check("reduce_scatter_tensor",
                    f"reduce_scatter_tensor({rules.describe(output)} <- {rules.describe(input)}, op={op})",
                    {"dtype": _dt(input), "numel": input.numel(), "op": op})
        src, _ = plan.to_wire(_raw(input), "readonly", rows=self.size())
        raw = _raw(output)
        buf, aliased = plan.wire_out(raw)
        work, gather = self._gloo_reduce_scatter(buf, src, plan.gloo_op)

        def finish() -> None:
            gather()
            plan.from_wire(buf, raw, aliased)
        return SimWork(work, [output], finish)

    def _copy_one(self, out: Tensor, inp: Tensor, reduce_op: Any, op: str) -> SimWork:
        """A reduce_scatter on a group of one rank, as ProcessGroupNCCL 2.11 does it: no dtype or op
        check, the output is the input. PREMUL_SUM on a floating dtype is scaled here although NCCL
        returns the input unscaled (finding nccl-size1-reduce-scatter-premul): the simulator gives
        the documented result."""
        name = rules.op_name(reduce_op)
        self._check(op, f"{op}({rules.describe(out)} <- {rules.describe(inp)}, op={name})",
                    {"dtype": _dt(out), "numel": out.numel(), "op": name})
        src = inp
        if rules.op_type(reduce_op) == rules.RedOpType.PREMUL_SUM and (inp.is_floating_point() or inp.is_complex()) \
                and inp.dtype not in rules.FLOAT8_DTYPES:
            factor = rules.premul_factor(reduce_op)
            if isinstance(factor, Tensor):
                factor = factor.reshape(-1)[0].item()
            real = inp.real.dtype if inp.is_complex() else inp.dtype
            src = inp * torch.tensor(factor, dtype=real)  # fl(x * fl(factor)) in the user's dtype
        out.copy_(src.reshape(out.shape))
        return SimWork(None, [out])

    def _gloo_reduce_scatter(self, out: Tensor, inp: Tensor, gloo_op: Any) -> tuple[Any, Callable[[], None]]:
        """gloo's _reduce_scatter_base of `inp` (n equal slices) into `out`, with the reduce op honoured.

        Returns the launched work and a step to run after it. gloo in torch 2.6.0 sums whatever the op
        (MIN of [0,1] and [1,2] on 2 ranks gave [1] and [3]); torch 2.9.1 and later honour it. Where the
        probe below finds the op ignored, a non-SUM op runs as an allreduce of the whole input and this
        rank keeps its slice; elsewhere the gloo call is the same as before. The probe is a collective
        too, so it runs where the call starts, in the group's issue order.
        """
        whole: list[Tensor] = []  # the whole input, reduced, when the op runs as an allreduce

        def start() -> dist.Work:
            if gloo_op == rules.RedOpType.SUM or self.size() == 1 or self._gloo_reduce_scatter_honours_op():
                return self._gloo._reduce_scatter_base(out, inp, _opts(ReduceScatterOptions, reduceOp=gloo_op))
            whole.append(inp.clone())
            return self._gloo.allreduce(whole, _opts(AllreduceOptions, reduceOp=gloo_op))

        def after() -> None:
            if whole:
                n, r = out.numel(), self.rank()
                out.copy_(whole[0][r * n:(r + 1) * n])
        return self._launch(start), after

    def _gloo_reduce_scatter_honours_op(self) -> bool:
        """Whether gloo's _reduce_scatter_base applies MIN (feature probe, once per group).

        Run on every rank of the group at its first non-SUM reduce_scatter (the strict check has made
        them all reach the same call), so the probe itself is a matching collective.
        """
        honours = getattr(self, "_reduce_scatter_op_ok", None)
        if honours is None:
            probe = torch.full((self.size(),), float(self.rank() != 0))
            got = torch.empty(1)
            self._gloo._reduce_scatter_base(got, probe, _opts(ReduceScatterOptions, reduceOp=rules.RedOpType.MIN)).wait()
            honours = self._reduce_scatter_op_ok = bool(got.item() == 0.0)
        return honours

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: list[Tensor], inputs: list[Tensor],
                                        opts: ReduceScatterOptions = ReduceScatterOptions()) -> SimWork:
        with collective_profiling.collective("reduce_scatter_tensor_coalesced", (outputs, inputs)):
            return self._pairwise(self.reduce_scatter_single, outputs, inputs, opts)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ------------------------------------------------------------------------- data movement
    @_collective("broadcast")
    def broadcast(self, tensors: list[Tensor], opts: BroadcastOptions = BroadcastOptions()) -> SimWork:
        t, _ = self._single(tensors, "broadcast")
        root = self._root(opts.rootRank, "broadcast")
        self._check("broadcast", f"broadcast({rules.describe(t)}, src={root})",
                    {"dtype": _dt(t), "numel": t.numel(), "src": root})
        broadcast_opts = _opts(BroadcastOptions, rootRank=root)
        return SimWork(self._launch(lambda: self._gloo.broadcast([_raw_bytes(t)], broadcast_opts)), [t])

    @_collective("all_gather")
    def allgather(self, output_lists: list[list[Tensor]], inputs: list[Tensor],
                  opts: AllgatherOptions = AllgatherOptions()) -> SimWork:
        t, _ = self._single(inputs, "all_gather")
        outs = _one(output_lists)
        self._count(outs, "all_gather", "tensor_list")
        if outs[self.rank()].numel() != t.numel():
            raise ValueError("Tensor input and output of _broadcast_oop must have the same number of elements "
                             + rules.note(f"rank {self.rank()}, all_gather() 'tensor' has {t.numel()}, "
                                          f"tensor_list[{self.rank()}] has {outs[self.rank()].numel()}"))
        self._check("all_gather", f"all_gather({rules.describe(t)} -> numels {_sizes(outs)})",
                    {"dtype": _dt(t)}, send=[t.numel()] * self.size(), recv=[o.numel() for o in outs])
        # Every rank makes the same gloo call: n slots of the widest size (NCCL allows uneven sizes).
        # A slot is the output's own memory when it fits exactly, else a buffer copied out after.
        nbytes = [o.numel() * o.element_size() for o in outs]
        width = max(nbytes)
        own = [o.is_contiguous() and b == width for o, b in zip(outs, nbytes)]
        slots = [_raw_bytes(o) if mine else torch.empty(width, dtype=torch.uint8) for o, mine in zip(outs, own)]
        src = _raw_bytes(t)
        if nbytes[self.rank()] != width:
            src = torch.zeros(width, dtype=torch.uint8)
            src[: nbytes[self.rank()]].copy_(_raw_bytes(t))
        work = self._launch(lambda: self._gloo.allgather([slots], [src], AllgatherOptions()))

        def finish() -> None:
            for o, slot, b, mine in zip(outs, slots, nbytes, own):
                if not mine:
                    o.copy_(_unbytes(slot[:b], o))
        return SimWork(work, outs, finish)

    @_collective("all_gather_into_tensor")
    def all_gather_single(self, output: Tensor, input: Tensor,  # noqa: A002 - torch's name
                          opts: AllgatherOptions = AllgatherOptions()) -> SimWork:
        ctx = self._ctx("all_gather_into_tensor", "input_tensor")
        rules.check_contiguous(input, ctx)
        rules.check_contiguous(output, self._ctx("all_gather_into_tensor", "output_tensor"))
        if input.dtype != output.dtype:
            raise TypeError("output tensor must have the same type as input tensor"
                            + rules.note(f"{ctx} is {input.dtype}, 'output_tensor' is {output.dtype}"))
        if input.numel() * self.size() != output.numel():
            raise ValueError("output tensor size must be equal to world_size times input tensor size"
                             + rules.note(f"{ctx} has {input.numel()} elements, 'output_tensor' "
                                          f"{output.numel()}, world size {self.size()}"))
        rules.check_dtype(input, ctx)
        self._check("all_gather_into_tensor",
                    f"all_gather_into_tensor({rules.describe(output)} <- {rules.describe(input)})",
                    {"dtype": _dt(input), "numel": input.numel()})
        # NCCL checks numel only, so a stacked (n, ...) output works: gather into flat byte views.
        out_bytes, in_bytes = _raw_bytes(output), _raw_bytes(input)
        work = self._launch(lambda: self._gloo._allgather_base(out_bytes, in_bytes, AllgatherOptions()))
        return SimWork(work, [output])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: list[Tensor], inputs: list[Tensor],
                                    opts: AllgatherOptions = AllgatherOptions()) -> SimWork:
        with collective_profiling.collective("all_gather_into_tensor_coalesced", (outputs, inputs)):
            return self._pairwise(self.all_gather_single, outputs, inputs, opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather_coalesced(self, output_lists: list[list[Tensor]], inputs: list[Tensor],
                            opts: AllgatherOptions = AllgatherOptions()) -> SimWork:
        raise NotImplementedError("ProcessGroupNCCL does not support allgather_coalesced"
                                  + rules.note(f"rank {self.rank()}"))

    @_collective("gather")
    def gather(self, output_lists: list[list[Tensor]], inputs: list[Tensor],
               opts: GatherOptions = GatherOptions()) -> SimWork:
        t, root, outs = self._checked_rooted_list("gather", inputs, output_lists, opts.rootRank)
        slots, gather_opts = _byte_lists(outs), _opts(GatherOptions, rootRank=root)
        work = self._launch(lambda: self._gloo.gather(slots, [_raw_bytes(t)], gather_opts))
        return SimWork(work, outs)

    @_collective("scatter")
    def scatter(self, outputs: list[Tensor], input_lists: list[list[Tensor]],
                opts: ScatterOptions = ScatterOptions()) -> SimWork:
        t, root, ins = self._checked_rooted_list("scatter", outputs, input_lists, opts.rootRank)
        if self.size() == 1:  # [nccl-run] a local copy: any layout, any dtype
            t.copy_(ins[0])
            return SimWork(None, [t])
        slots, scatter_opts = _byte_lists(ins), _opts(ScatterOptions, rootRank=root)
        work = self._launch(lambda: self._gloo.scatter([_raw_bytes(t)], slots, scatter_opts))
        return SimWork(work, [t])

    def _checked_rooted_list(self, op: str, tensors: list[Tensor], lists: list[list[Tensor]],
                             root: int) -> tuple[Tensor, int, list[Tensor]]:
        """gather's and scatter's checks, local then strict: (this rank's tensor, root, root's list or [])."""
        list_kind, root_name = {"gather": ("output", "dst"), "scatter": ("input", "src")}[op]
        root = self._root(root, op)  # NCCL checks the root first
        if op == "scatter":
            t = _one(tensors)
            self._scatter_layout_and_dtype(t, self._ctx(op, "tensor"))
        else:
            t, _ = self._single(tensors, op, unconvertible=True)
        items = self._root_list(lists, t, root, op, list_kind)
        self._check(op, f"{op}({rules.describe(t)}, {root_name}={root})",
                    {"dtype": _dt(t), "numel": t.numel(), root_name: root})
        return t, root, items

    def _root_list(self, lists: list[list[Tensor]], t: Tensor, root: int, op: str, kind: str) -> list[Tensor]:
        """The root's list of n tensors, each of t's dtype and shape (NCCL's ValueErrors otherwise)."""
        prefix = f"ProcessGroupNCCL::{op}: "
        where = rules.note(f"rank {self.rank()}, {op}() with root {root}")
        if self.rank() != root:
            if lists:
                raise ValueError(f"{prefix}requires empty {kind} on non-root{where}")
            return []
        if len(lists) != 1:
            raise ValueError(f"{prefix}requires a single-element {kind} list containing a list with "
                             f"{self.size()} tensors.{where}")
        items = lists[0]
        if len(items) != self.size():
            raise ValueError(f"{prefix}Incorrect {kind} list size {len(items)}. {kind.capitalize()} list size "
                             f"should be {self.size()}, same as size of the process group.{where}")
        for j, x in enumerate(items):
            if op == "scatter":
                self._scatter_layout_and_dtype(x, f"rank {self.rank()}, {op}() list entry {j}")
            else:
                rules.check_contiguous(x, f"rank {self.rank()}, {op}() list entry {j}")
            if x.dtype != t.dtype:
                raise ValueError(f"{prefix}invalid tensor type at index {j} (expected {t.dtype}, got {x.dtype})"
                                 f"{where}")
            if x.shape != t.shape:
                raise ValueError(f"{prefix}invalid tensor size at index {j} (expected {list(t.shape)}, "
                                 f"got {list(x.shape)}){where}")
        return list(items)

    def _scatter_layout_and_dtype(self, t: Tensor, ctx: str) -> None:
        """scatter [nccl-run]: one rank checks nothing; more need dense tensors (transposed works, NCCL
        moves memory order on both ends; strided views are refused here although NCCL scrambles them
        silently, finding nccl-scatter-strided) and NCCL's dtypes (RuntimeError "Unconvertible")."""
        if self.size() == 1:
            return
        if not rules.is_dense(t):
            raise ValueError(f"{rules.CONTIGUOUS_MESSAGE}{rules.note(ctx)}; shape {tuple(t.shape)}, strides {t.stride()}")
        rules.check_dtype_unconvertible(t, ctx)

    @_collective("all_to_all")
    def alltoall(self, outputs: list[Tensor], inputs: list[Tensor],
                 opts: AllToAllOptions = AllToAllOptions()) -> SimWork:
        self._count(outputs, "all_to_all", "output_tensor_list")
        self._count(inputs, "all_to_all", "input_tensor_list")
        for name, ts in (("output_tensor_list", outputs), ("input_tensor_list", inputs)):
            for j, x in enumerate(ts):  # [nccl-run] contiguous first, then torch::cuda::nccl's dtype error
                rules.check_contiguous(x, self._ctx("all_to_all", f"{name}[{j}]"))
        for name, ts in (("output_tensor_list", outputs), ("input_tensor_list", inputs)):
            for j, x in enumerate(ts):
                rules.check_dtype_unconvertible(x, self._ctx("all_to_all", f"{name}[{j}]"))
        self._check("all_to_all", f"all_to_all({_dt(inputs[0])}, send {_sizes(inputs)}, recv {_sizes(outputs)})",
                    {"dtype": _dt(inputs[0])}, send=[x.numel() for x in inputs], recv=[o.numel() for o in outputs])
        in_bytes = [x.numel() * x.element_size() for x in inputs]
        out_bytes = [o.numel() * o.element_size() for o in outputs]
        flat_in = torch.cat([_raw_bytes(x.contiguous()) for x in inputs])
        flat_out = torch.empty(sum(out_bytes), dtype=torch.uint8)
        work = self._launch(lambda: self._gloo.alltoall_base(flat_out, flat_in, out_bytes, in_bytes,
                                                             AllToAllOptions()))

        def finish() -> None:
            for o, part in zip(outputs, flat_out.split(out_bytes)):
                o.copy_(_unbytes(part, o))
        return SimWork(work, outputs, finish)

    @_collective("all_to_all_single")
    def all_to_all_single(self, output: Tensor, input: Tensor,  # noqa: A002 - torch's name
                          output_split_sizes: list[int], input_split_sizes: list[int],
                          opts: AllToAllOptions = AllToAllOptions()) -> SimWork:
        for name, x in (("output", output), ("input", input)):
            rules.check_contiguous(x, self._ctx("all_to_all_single", name))
            rules.check_dtype_unconvertible(x, self._ctx("all_to_all_single", name))
            if x.dim() == 0:
                raise ValueError(f"simgpu: {self._ctx('all_to_all_single', name)} must have a dim 0")
        in_splits = self._splits(input_split_sizes, input, "input")
        out_splits = self._splits(output_split_sizes, output, "output")
        in_row, out_row = _row_numel(input), _row_numel(output)
        send = [s * in_row for s in in_splits]
        recv = [s * out_row for s in out_splits]
        self._check("all_to_all_single", f"all_to_all_single({_dt(input)}, send {send}, recv {recv})",
                    {"dtype": _dt(input)}, send=send, recv=recv)
        work = self._launch(lambda: self._gloo.alltoall_base(_raw_bytes(output), _raw_bytes(input),
                                        [s * out_row * output.element_size() for s in out_splits],
                                        [s * in_row * input.element_size() for s in in_splits],
                                        AllToAllOptions()))
        return SimWork(work, [output])

    alltoall_base = all_to_all_single

    def _pairwise(self, single: Callable[..., SimWork], outputs: list[Tensor], inputs: list[Tensor],
                  opts: Any) -> SimWork:
        """A *_coalesced call as one single-tensor call per (output, input) pair, in order.

        NCCL runs the pairs as one group; running them one after another gives the same results, and
        each pair gets its own local and strict checks. Lists of different lengths are refused before
        anything runs.
        """
        if len(outputs) != len(inputs):
            raise ValueError(f"simgpu: {len(outputs)} output tensors for {len(inputs)} input tensors "
                             f"(rank {self.rank()}; on NCCL: undefined behaviour)")
        return SimWork.all_of([single(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    def _splits(self, splits: list[int], t: Tensor, name: str) -> list[int]:
        """c10d::checkSplitSizes; with no splits at all, n equal parts of dim 0."""
        n = self.size()
        where = rules.note(self._ctx("all_to_all_single", name))
        if not splits:
            if t.size(0) % n != 0:
                raise RuntimeError(f"Tensor's dim 0 does not divide equally across group size{where}; "
                                   f"dim 0 is {t.size(0)}, group size {n}")
            return [t.size(0) // n] * n
        if len(splits) != n:
            raise RuntimeError(f"Number of tensor splits not equal to group size{where}; got {list(splits)}")
        if sum(splits) != t.size(0):
            raise RuntimeError(f"Split sizes doesn't match total dim 0 size{where}; splits {list(splits)} "
                               f"sum to {sum(splits)}, dim 0 is {t.size(0)}")
        return [int(s) for s in splits]

    # ------------------------------------------------------------------------- point to point
    @_point_to_point("send")
    def send(self, tensors: list[Tensor], dst: int, tag: int = 0) -> SimWork:
        t = _one(tensors)
        rules.check_p2p_dense(t, self._ctx("send", "tensor"))
        rules.check_dtype(t, self._ctx("send", "tensor"))
        rules.warn_p2p_layout(t)
        if dst == self.rank():  # NCCL sends to itself within a group; gloo has no pair for that
            self._loopback.append(t.detach().clone())
            return SimWork(None, [t])  # nothing to wait for
        self._pairs.first_contact(dst, "send")
        wire_tag = self._p2p_tag(tag)  # the check pairs messages as the wire does
        posted = self._p2p.post("send", dst, wire_tag, t)
        payload = _PLAN_TOKEN.clone() if placement.storage_less(t) else _raw_bytes(t.contiguous())
        if posted is None:
            inner = self._gloo.send([payload], dst, wire_tag)
        else:
            eager = self._pairs.eager(payload.numel())
            if eager:
                payload = payload.clone()  # completes at once: the program may reuse its tensor
            deferred = self._sender(dst).submit(posted, lambda: self._send_sized(posted, payload, dst, wire_tag))
            inner = _SendHandle(deferred, None if eager else
                                lambda: self._pairs.await_recv(dst, posted["site"], deferred.settled,
                                                               lambda: posted.update(abandoned=True),
                                                               self._p2p.peer_key(posted)))
        work = SimWork(inner, [t], lambda: self._p2p.verify(posted))
        work.what = _p2p_what("send", dst, t, posted)
        self._batched(work)
        if comm_log.ACTIVE is not False:
            comm_log.record("send", 2, (tensors,))
        return work

    def _sender(self, dst: int) -> Issuer:
        """The thread that starts this rank's sends to `dst`, in order, each once the recv it will be
        delivered to is posted (gloo transmits only then anyway, so an isend returns at once as before)."""
        if dst not in self._senders:
            self._senders[dst] = Issuer(self._await_recv, name=f"simgpu-send-{self.rank()}-{dst}", guard=suspended,
                                        drain_seconds=self._timeout_s)
        return self._senders[dst]

    def _await_recv(self, posted: dict) -> None:
        self._p2p.await_peer(posted, self._timeout_s)

    def _send_sized(self, posted: dict, payload: Tensor, dst: int, wire_tag: int) -> dist.Work:
        """Send the message, or, when the posted recv has another size, exactly as many bytes as it expects:
        gloo aborts the receiving process (SIGABRT) on a message larger than the buffer; this way the pair's
        stream stays in step and both ranks raise P2PMismatch from the check (issue 28)."""
        expects = self._p2p.expected_bytes(posted)
        if expects is not None and placement._storage_less and payload.numel() == 1:
            expects = None  # a plan's storage-less message: one byte keeps the pair in step (_PLAN_TOKEN)
        if expects is not None and expects != payload.numel():
            resized = torch.zeros(expects, dtype=torch.uint8)
            n = min(expects, payload.numel())
            resized[:n].copy_(payload[:n])
            payload = resized
        return self._gloo.send([payload], dst, wire_tag)

    @_point_to_point("recv")
    def recv(self, tensors: list[Tensor], src: int, tag: int = 0) -> SimWork:
        t = _one(tensors)
        rules.check_p2p_dense(t, self._ctx("recv", "tensor"))
        rules.check_dtype(t, self._ctx("recv", "tensor"))
        rules.warn_p2p_layout(t)
        if src == self.rank():
            own = SimWork(None, [t], lambda: self._receive_own(t))
            self._batched(own)
            return own
        self._pairs.first_contact(src, "recv")
        no_data = placement.storage_less(t)
        target = t if no_data else _contiguous(t)
        posted = self._p2p.post("recv", src, self._p2p_tag(tag), t)

        def finish() -> None:
            self._p2p.verify(posted)
            if target is not t:
                t.copy_(target)
        wire = _PLAN_TOKEN.clone() if no_data else _raw_bytes(target)
        work = SimWork(self._gloo.recv([wire], src, self._p2p_tag(tag)), [t], finish)
        work.what = _p2p_what("recv", src, t, posted)
        self._batched(work)
        if comm_log.ACTIVE is not False:
            comm_log.record("recv", 2, (tensors,))
        return work

    def _p2p_tag(self, tag: int) -> int:
        """The gloo tag a message travels with: 0 for all, as ProcessGroupNCCL ignores tags (the k-th recv
        from a peer gets its k-th send). tests/broken_backends.py overrides this to honour tags."""
        return 0

    def _receive_own(self, t: Tensor) -> None:
        """A recv from this rank itself, completed by the send the same batch posted (in either order);
        like any other peer, the k-th recv from itself gets the k-th send to itself, tags ignored."""
        if not self._loopback:
            raise RuntimeError(f"simgpu: rank {self.rank()} waited for a recv from itself that no send "
                               f"to itself matches (on NCCL: a hang)")
        message = self._loopback.popleft()
        if message.shape != t.shape or message.dtype != t.dtype:
            raise RuntimeError(f"simgpu: rank {self.rank()} sent {message.dtype}{list(message.shape)} to itself but "
                               f"receives into {t.dtype}{list(t.shape)}")
        t.copy_(message)

    def recv_anysource(self, tensors: list[Tensor], tag: int = 0) -> SimWork:
        raise NotImplementedError("ProcessGroupNCCL does not support recvAnysource"
                                  + rules.note(f"rank {self.rank()}, recv()/irecv() without src"))

    # ------------------------------------------------------------------------- sync
    @_collective("barrier")
    def barrier(self, opts: BarrierOptions = BarrierOptions()) -> SimWork:
        self._check("barrier", "barrier()")
        work = SimWork(self._launch(lambda: self._gloo.barrier(opts)), [])
        work.host_blocks = True
        return work

    def _start_coalescing(self, device: Any = None) -> None:
        """NCCL batches the ops up to _end_coalescing; running them as they come gives the same results
        (send/recv in between use the group's communicator: no pair rendezvous)."""
        self._pairs.coalescing(True)
        self._local.batch = []

    def _end_coalescing(self, device: Any = None) -> SimWork:
        """The batch's one work, done when all its ops are (NCCL's group end): torch 2.4's
        batch_isend_irecv waits on this work alone, so a recv finishes only through it."""
        self._pairs.coalescing(False)
        works, self._local.batch = getattr(self._local, "batch", None) or [], None
        return SimWork.all_of(works, [])

    def _batched(self, work: Any) -> None:
        """Between _start_coalescing and _end_coalescing, the works the batch's one work waits for."""
        batch = getattr(self._local, "batch", None)
        if batch is not None and isinstance(work, SimWork):
            batch.append(work)

    def shutdown(self) -> None:
        """destroy_process_group: the collectives already issued finish first (Issuer.finish), as they do on
        NCCL; shutting gloo down under them closed the connections a peer still waited on."""
        comm_log.flush()
        self._issuer.finish()
        for sender in self._senders.values():
            sender.finish()
        self._gloo.shutdown()

    def abort(self) -> None:
        self._issuer.stop()
        for sender in self._senders.values():
            sender.stop()
        self._gloo.abort()


# ----------------------------------------------------------------------------- helpers
def _p2p_what(op: str, peer: int, t: Tensor, posted: dict | None) -> str:
    """A point-to-point op as unfinished_operations() names it (group ranks, as the call gave them)."""
    site = posted["site"] if posted else strict_call_site()
    return f"{op}({rules.describe(t)}, {'dst' if op == 'send' else 'src'}={peer}) at {site}"


def _nothing() -> None:
    pass


def _one(items: Sequence[Any]) -> Any:
    if len(items) != 1:
        raise RuntimeError(rules.MULTI_DEVICE_MESSAGE)
    return items[0]


_COMPLEX_REDUCE_OPS = (rules.RedOpType.SUM, rules.RedOpType.AVG, rules.RedOpType.PREMUL_SUM)


def _reduce_real_view(t: Tensor, reduce_op: Any) -> Tensor:
    """ProcessGroupNCCL::reduce (C++, torch 2.11 [nccl-run]) reduces a complex tensor as its real view for
    SUM/AVG/PREMUL_SUM; other ops raise RuntimeError "reduce does not support<op>on complex tensors",
    the op printed as a raw character (c10::str of the enum), as torch prints it."""
    if not t.is_complex():
        return t
    kind = rules.op_type(reduce_op)
    if kind not in _COMPLEX_REDUCE_OPS:
        raise RuntimeError(f"reduce does not support{chr(int(kind))}on complex tensors")
    return torch.view_as_real(t)


def _row_numel(t: Tensor) -> int:
    rows = t.size(0)
    if rows:
        return t.numel() // rows
    row = 1
    for s in t.shape[1:]:
        row *= s
    return row


def _byte_lists(tensors: Sequence[Tensor]) -> list[list[Tensor]]:
    """gloo's gather/scatter list argument: [byte views] on the root, [] elsewhere."""
    return [[_raw_bytes(x) for x in tensors]] if tensors else []


def _opts(cls: type, **fields: Any) -> Any:
    """A fresh c10d options object (AllreduceOptions, ...) with the given fields set."""
    o = cls()
    for name, value in fields.items():
        setattr(o, name, value)
    return o


def _make_gloo(store: dist.Store, rank: int, size: int, timeout: timedelta) -> dist.ProcessGroupGloo:
    """A gloo group on loopback, or on SIMGPU_SIM_INTERFACE for a world across hosts (`simgpu run
    --sim-interface`, docs/multinode.md).

    Its pairs connect in the constructor (lazy_init=False, whatever TORCH_GLOO_LAZY_INIT says), after
    which its listener is closed to strangers (simgpu.gloo_listener says why)."""
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    before = gloo_listener.open_sockets()
    interface = os.environ.get(SIM_INTERFACE_ENV, "")
    opts._devices = [_gloo_device(**({"interface": interface} if interface else {"hostname": "127.0.0.1"}))]
    group = dist.ProcessGroupGloo(store, rank, size, opts)
    gloo_listener.seal_new_listener(before)
    return group


def _gloo_device(**where: str) -> Any:
    """A gloo device whose pairs connect at once (a torch without `lazy_init` always connects at once)."""
    try:
        return dist.ProcessGroupGloo.create_device(**where, lazy_init=False)
    except TypeError:
        return dist.ProcessGroupGloo.create_device(**where)


def _gpus_simulated() -> bool:
    import simgpu.cuda_sim

    return simgpu.cuda_sim.active()


def create_sim_process_group(store: dist.Store, rank: int, size: int, timeout: timedelta) -> SimProcessGroup:
    """The creator torch calls for init_process_group("sim") and new_group (store is per group)."""
    return SimProcessGroup(store, rank, size, timeout)


_JOB_SECRET_KEY = "simgpu/job-secret"  # under the first group's store (the world's): one per torchrun attempt


def _agree_on_a_secret_across_hosts(store: dist.Store) -> None:
    """A world across hosts (SIMGPU_SIM_INTERFACE) gets no secret from its launcher (each node's
    `simgpu run` would draw a different one); unless SIMGPU_GROUP_SECRET is set on every node, the
    ranks of the first group (the world) agree on one through its store, the first to arrive drawing
    it, and every later group of the process signs with it."""
    if os.environ.get(SIM_INTERFACE_ENV) and not os.environ.get(GROUP_SECRET_ENV):
        os.environ[GROUP_SECRET_ENV] = store.compare_set(_JOB_SECRET_KEY, "", secrets.token_hex(16)).decode()


def register() -> None:
    """Register "sim" with torch.distributed (idempotent; done on import).

    Also collects garbage at exit: DDP and a SimProcessGroup can sit in a reference cycle, and
    destroying them during interpreter finalization aborts the process ("terminate called
    without an active exception") about one run in five.
    """
    if not getattr(register, "collects_at_exit", False):
        atexit.register(gc.collect)
        register.collects_at_exit = True  # type: ignore[attr-defined]
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, create_sim_process_group, devices=["cpu"])


register()

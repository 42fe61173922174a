"""CUDA graphs on simulated GPUs: `torch.cuda.CUDAGraph`, and through it torch's own `torch.cuda.graph`
and `make_graphed_callables`.

On CUDA a capture records the kernels a stream is given, without running them, and a replay runs them
again on the same memory: the captured tensors (the graph's private pool) are where the inputs are read
and the outputs written, each replay. Here a capture records the ops dispatched on its thread (a
dispatch mode above the simulation's placement), and runs them, since their results' shapes, dtypes
and storages are what the program goes on with; what they wrote into tensors made before the capture
is put back at its end, so that, as on CUDA, a capture changes nothing the program had (an optimizer
step captured does not step). A replay runs the recorded ops again in order: an op that writes its
arguments writes them again, an op that made a tensor writes its new result into the tensor the
capture made (later ops, and the program, hold that one), views alias as they did. Random ops draw
again at each replay, as a graph's Philox offset advances.

As on CUDA: a capture on the default stream fails, `torch.cuda.is_current_stream_capturing()` says
True inside one, and reading a value back (`.item()`, synchronize) inside a capture fails with CUDA's
error. Not simulated: the private pool's separate accounting (the captured tensors stay allocated in
the device's pool, as the graph keeps its memory), capture_error_mode's checks on other threads.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from simgpu.cuda_sim import placement, plan_host

_state = threading.local()  # .capturing: the capture under way on this thread
_pool_ids = iter(range(1, 1 << 62))
_pool_lock = threading.Lock()
_NOT_PERMITTED = "CUDA error: operation not permitted when stream is capturing"
_INVALIDATED = "CUDA error: operation failed due to a previous error during capture"


def graph_pool_handle() -> tuple[int, int]:
    """An opaque token naming a memory pool graphs may share (as torch.cuda.graph_pool_handle())."""
    with _pool_lock:
        return (0, next(_pool_ids))


def is_current_stream_capturing() -> bool:
    return getattr(_state, "capturing", None) is not None


def count_captured_step() -> bool:
    """An optimizer step returned inside a capture: True, and each replay of the graph ends a plan's step
    (plan.py), as the replay is the step on the GPU."""
    graph = getattr(_state, "capturing", None)
    if graph is None:
        return False
    graph._steps += 1
    return True


def collective(args: tuple, kwargs: dict, issue: Any) -> contextlib.AbstractContextManager:
    """Around a simulated process group's collective (backend.py): outside a capture, nothing (every
    collective passes here); inside one, _recorded_collective."""
    graph = getattr(_state, "capturing", None)
    capture = graph._capture if graph is not None else None
    if capture is None or capture.paused:
        return _NOTHING
    return _recorded_collective(capture, args, kwargs, issue)


_NOTHING = contextlib.nullcontext()
_VIEW = object()  # a recorded view's place for its results (_Capture.ops)


@contextlib.contextmanager
def _recorded_collective(capture: "_Capture", args: tuple, kwargs: dict, issue: Any) -> Iterator[None]:
    """A collective inside a capture: recorded whole, so that each replay issues it again in its place and
    waits for it (as the graph's stream would), its tensors made before the capture kept to be put back,
    and its own plumbing not recorded op by op."""
    for t in tree_flatten((args, kwargs))[0]:
        if isinstance(t, torch.Tensor):
            capture._keep(t)
    capture.ops.append((None, issue, {}, None))
    capture.paused = True
    try:
        yield
    finally:
        capture.paused = False


def refuse_inside_capture(what: str) -> None:
    """A host read-back or synchronize inside a capture fails, as CUDA's does, and the capture with it:
    its end then raises CUDA's "previous error" (what leaves a `with torch.cuda.graph(...)` block)."""
    graph = getattr(_state, "capturing", None)
    if graph is not None:
        graph._invalidated = True
        raise RuntimeError(f"{_NOT_PERMITTED} ({what} inside a CUDA graph capture)")


def _weak(value: Any) -> Any:
    return weakref.ref(value) if isinstance(value, torch.Tensor) else value


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an op writes (its schema's `Tensor(a!)` arguments, lists included)."""
    out: list[torch.Tensor] = []
    for i in placement.written_positions(func):
        argument = func._schema.arguments[i]
        value = kwargs.get(argument.name) if argument.kwarg_only or i >= len(args) else args[i]
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(v for v in value if isinstance(v, torch.Tensor))
    return out


class _Capture(TorchDispatchMode):
    """The ops dispatched on this thread while a graph captures: recorded, run, and what they wrote into
    earlier tensors kept to be put back."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        # (op, args, kwargs, its results held weakly, None for an op that writes its arguments, _VIEW for a view);
        # (None, a collective's issue, {}, None) for a collective
        self.ops: list[tuple[Any, Any, dict, Any]] = []
        self.made: set[int] = set()  # storages the capture made (their data_ptr)
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # earlier storage -> (tensor, its copy)
        self.paused = False  # a collective runs: its own ops are not the graph's

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:  # a collective's own plumbing (collective())
            return func(*args, **kwargs)
        if getattr(func, "namespace", None) == "c10d":  # a collective shown to dispatch modes (collective_echo.py): captured whole
            return func(*args, **kwargs)  # by collective(), where the simulated group issues it
        if func is torch.ops.aten._local_scalar_dense.default:
            refuse_inside_capture("a value read back to the host")
        if getattr(func, "is_view", False):  # (a higher-order operator, flex attention's, makes new results)
            out = func(*args, **kwargs)  # not run again: the view aliases its input's memory at every replay;
            self.ops.append((func, args, kwargs, _VIEW))  # recorded, its input held: a result that only a view
            return out  # reaches (a gradient's .t()) keeps its weakly held tensor alive through it
        written = _written(func, args, kwargs)
        for t in written:
            self._keep(t)
        out = func(*args, **kwargs)
        if written:  # a replay writes its arguments again: no result of its own to write
            self.ops.append((func, args, kwargs, None))
            return out
        for t in tree_flatten(out)[0]:  # a new result
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self.made.add(t.untyped_storage().data_ptr())
        # the results held weakly: a strong hold would change what autograd does next (AccumulateGrad keeps
        # a gradient nobody else holds, and copies one held elsewhere: four copies a step more than CUDA)
        self.ops.append((func, args, kwargs, tree_map(_weak, out)))
        return out

    def _keep(self, t: torch.Tensor) -> None:
        """A tensor made before the capture is about to be written: its storage's bytes, once."""
        if t.device.type == "meta" or t.untyped_storage().nbytes() == 0:
            return  # a plan's storage-less tensor: no values to put back
        key = t.untyped_storage().data_ptr()
        if key in self.made or key in self.saved:
            return
        with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():  # not the graph's ops
            whole = t.new_empty(0, dtype=torch.uint8).set_(t.untyped_storage())
            self.saved[key] = (whole, whole.clone())

    def restore(self) -> None:
        with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():
            for whole, copy in self.saved.values():
                whole.copy_(copy)
        self.saved.clear()


class CUDAGraph:
    """torch.cuda.CUDAGraph on simulated GPUs (the module docstring)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._ops: list[tuple[Any, tuple, dict, Any]] = []
        self._capture: _Capture | None = None
        self._pool: tuple[int, int] | None = None
        self._captured = False
        self._invalidated = False
        self._steps = 0  # optimizer steps captured (a plan ends one at each replay)

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **kwargs: Any) -> None:
        from simgpu.cuda_sim import devices

        if is_current_stream_capturing():
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing "
                               "(a capture is already under way on this thread)")
        if devices.stream_key(devices.current()) == 0:
            raise RuntimeError("CUDA graphs must be captured on a non-default stream. "
                               "(However, after capture, it's ok to replay them on the default stream.)")
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise RuntimeError(f"Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, "
                               f"got {capture_error_mode}")
        self.reset()
        self._invalidated = False
        self._steps = 0
        self._pool = tuple(pool) if pool is not None else graph_pool_handle()
        self._capture = _Capture()
        self._capture.__enter__()
        _state.capturing = self

    def capture_end(self) -> None:
        capture = self._capture
        if capture is None or getattr(_state, "capturing", None) is not self:
            raise RuntimeError("CUDA graph capture_end called without a capture under way on this thread")
        _state.capturing = None
        self._capture = None
        capture.__exit__(None, None, None)
        capture.restore()
        if self._invalidated:
            raise RuntimeError(_INVALIDATED)
        self._ops = capture.ops
        self._captured = True

    def instantiate(self) -> None:
        if not self._captured:
            raise RuntimeError("CUDA graph instantiate called before a capture ended")

    def replay(self) -> None:
        if not self._captured:
            raise RuntimeError("CUDA graph replay called before a capture ended")
        refuse_inside_capture("a graph's replay")
        # one launch for the host on CUDA, the GPU runs every kernel; the ops as they were dispatched, below
        # the program's checks (torch functions)
        with torch.no_grad(), plan_host.SIM, torch._C.DisableTorchFunction():
            for func, args, kwargs, out in self._ops:
                if func is None:  # a collective (collective())
                    work = args()
                    if hasattr(work, "wait"):
                        work.wait()
                    continue
                if out is _VIEW:
                    continue
                fresh = func(*args, **kwargs)
                if out is None:
                    continue  # it wrote its arguments again
                with placement.suspended():  # the kernel wrote there on CUDA: no kernel of its own (nor a plan's price)
                    for held, new in zip(tree_flatten(out)[0], tree_flatten(fresh)[0]):
                        kept = held() if isinstance(held, weakref.ref) else None
                        if kept is not None and kept is not new:  # a result nothing holds any more is not read
                            kept.copy_(new)
        from simgpu.cuda_sim import plan

        for _ in range(self._steps if plan.RECORDER is not None else 0):
            plan.RECORDER.step()

    def reset(self) -> None:
        self._ops = []
        self._captured = False

    def pool(self) -> tuple[int, int]:
        if self._pool is None:
            self._pool = graph_pool_handle()
        return self._pool

    def enable_debug_mode(self) -> None:
        pass  # debug_dump writes what was recorded

    def debug_dump(self, debug_path: str) -> None:
        with open(debug_path, "w") as f:
            f.write("".join(f"{func or 'collective'}\n" for func, *_ in self._ops))

    def __repr__(self) -> str:
        return f"<simulated torch.cuda.CUDAGraph: {len(self._ops)} ops captured>"


def install() -> None:
    """torch.cuda.graph.__enter__ empties the pinned host cache through torch._C; the CPU build has none."""
    if not hasattr(torch._C, "_host_emptyCache"):
        torch._C._host_emptyCache = lambda: None

"""Where every aten op's results live: the simulated GPU of its inputs, whoever called the op.

A TorchDispatchMode sees each aten op after torch's Python and C++ layers have decomposed it:
ops called from the program, from the autograd engine (backward kernels, gradient hooks, custom
Functions' backward), from C++ optimizers and foreach kernels, from DDP's reducer, and the local
ops of tensor subclasses such as DTensor. Torch function modes do not reach most of those (the
autograd engine runs hooks without them), which is why placement lives here and not in a
function mode.

For each op:
- a `device=` argument naming a simulated GPU becomes a host allocation labelled with that GPU
  (factories, `_to_copy`);
- otherwise the results take the GPU of the op's inputs; inputs on two different GPUs raise CUDA's
  error (foreach ops pair their lists element by element); host inputs join silently, since C++
  builds tensors from a simulated tensor's (host) options (DDP's buckets, autograd's zero grads):
  the Python-level check in tensors.py refuses host tensors in the program's own calls;
- random ops on a simulated GPU draw from that GPU's generator, never the host's, and draw CUDA's
  numbers (random_ops.py); a random factory the program called with `device=` a simulated GPU
  (tensors.py) arrives here with a host device and lands on the GPU `random_factory_on` names.
"""
from __future__ import annotations

import functools
import threading
import types
from typing import Any, Callable, Iterator

import torch
from torch.utils import _python_dispatch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from simgpu.cuda_sim import autocast, devices, generators, plan_host, random_ops, workspaces
from simgpu.cuda_sim.cuda_kernels import STAND_INS

aten = torch.ops.aten
_state = threading.local()
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_CPU = torch.device("cpu")
_STRIDED = torch.strided


_META = torch.device("meta")
_storage_less = False  # a plan (cuda_sim/plan.py): simulated GPUs' tensors are meta tensors
_plan_hook: Callable[[Any, tuple, dict, Any], None] | None = None


SMALL_BYTES = 1 << 20  # a plan keeps the data of an integer GPU tensor up to this size (plan.py)


def keeps_data(t: torch.Tensor | None) -> bool:
    """In a plan: whether a GPU tensor like `t` holds data. Integer and bool tensors up to SMALL_BYTES do
    (indices, sizes, flags, pickled objects: what programs and DDP send each other as values); floating
    ones never (every tensor gradients flow through is then storage-less alike, as autograd requires).
    A copy of a tensor with data keeps it whatever its size (copy_backing)."""
    return t is not None and not (t.is_floating_point() or t.is_complex()) \
        and t.numel() * t.element_size() <= SMALL_BYTES


def backing(like: torch.Tensor | None = None) -> torch.device:
    """Where a simulated GPU's tensor like `like` is made below Python: host memory, or in a plan
    (`simgpu run --plan`) "meta" (no data, no kernels) unless keeps_data(like)."""
    if not _storage_less or keeps_data(like):
        return _CPU
    return _META


def copy_backing(source: torch.Tensor) -> torch.device:
    """backing() for a copy onto a simulated GPU of `source`, a tensor with data (a host tensor, or one a
    plan kept): an integer or bool one keeps its values whatever its size. They are the program's, on the
    host already (tokens, a pickled object that send_object_list moves to the GPU), not values the GPU would
    compute; above SMALL_BYTES a pickled object's bytes were lost and its receiver unpickled zeros."""
    if not _storage_less or not (source.is_floating_point() or source.is_complex()):
        return _CPU
    return _META


def factory_backing(func: Callable, args: tuple, kwargs: dict) -> torch.device:
    """backing() for a factory's result, its size found by running the factory on "meta" first."""
    if not _storage_less:
        return _CPU
    with suspended():
        out = func(*args, **{**kwargs, "device": _META})
    return backing(out if isinstance(out, torch.Tensor) else None)


def make_storage_less(hook: Callable[[Any, tuple, dict, Any], None] | None = None) -> None:
    """From now on, tensors made on simulated GPUs hold no data (cuda_sim/plan.py); `hook` sees every op
    that ran on a simulated GPU (func, args, kwargs, result), to price it."""
    global _storage_less, _plan_hook
    _storage_less = True
    _plan_hook = hook


def storage_less(t: torch.Tensor) -> bool:
    """Whether `t` holds no data (a meta tensor below Python), whatever the program's modes say of it."""
    with _NoTorchFunction():
        return _TensorBase.is_meta.__get__(t)


_TensorBase = torch._C.TensorBase


def in_kernel() -> bool:
    """Whether a plan's op kernel is running on this thread: tensors then report their own device (meta),
    as the Python meta kernels and torch's refs compare devices and make tensors on `t.device`."""
    return getattr(_state, "kernel", 0) > 0
_NO_DISPATCH = torch._C._disabled_torch_dispatch_impl  # plain tensors and nn.Parameter
_NoTorchFunction = torch._C.DisableTorchFunction


class suspended:
    """Run torch calls untouched by the simulation (the simulator's own plumbing uses it)."""

    def __enter__(self) -> None:
        _state.suspended = getattr(_state, "suspended", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _state.suspended -= 1


def is_suspended() -> bool:
    return getattr(_state, "suspended", 0) > 0


class host_requested:
    """The program asked for host results (`dtensor.to("cpu")`): device=cpu means the host here,
    not C++ passing a simulated tensor's options on."""

    def __enter__(self) -> None:
        _state.host = getattr(_state, "host", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _state.host -= 1


class elsewhere_requested:
    """The program asked for a tensor on torch's own "meta" device (`t.to("meta")`, a factory under
    `torch.device("meta")`): in a plan, where the simulated GPUs' tensors are meta below Python too, a
    "meta" device that C++ passes on is the GPU of the tensor whose options it took (DDP's bucket indices
    made on its parameters' device), taken to be the current GPU."""

    def __enter__(self) -> None:
        _state.elsewhere = getattr(_state, "elsewhere", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _state.elsewhere -= 1


def issue_on(index: int | None) -> int | None:
    """Mark the program's call of a C++ function (`torch.linalg.norm(x)`) whose tensors are on simulated GPU
    `index` (tensors.py; None ends the mark) and return the previous mark. What that C++ makes from the
    input's options with no tensor argument (the norm of an empty matrix: `at::zeros({}, A.options())`)
    arrives here with a host device and nothing to say its GPU; on CUDA it is on the input's GPU, so here
    too. A function, not a context manager: it runs on every such call of the program."""
    previous = getattr(_state, "issued", None)
    _state.issued = index
    return previous


class random_factory_on:
    """The program's `torch.rand(..., device="cuda:i")` (tensors.py): the random op it reaches here, with a
    host device, makes its result on simulated GPU i, drawing from that GPU's generator."""

    def __init__(self, index: int):
        self.index = index

    def __enter__(self) -> None:
        self.previous = getattr(_state, "random_target", None)
        _state.random_target = self.index

    def __exit__(self, *exc: Any) -> None:
        _state.random_target = self.previous


def mixed_devices(a: str, b: str) -> RuntimeError:
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


def tensors_of(args: tuple, kwargs: dict, unwrap: bool = True) -> Iterator[torch.Tensor]:
    """The tensors of a call: arguments are tensors, or lists of them (one level deep). With `unwrap`,
    functorch's wrappers (vmap's batched tensors, grad's) stand for the tensor they wrap: they hold no
    storage, so no label, and would pass for host memory. Aten ops below Python never see them."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield underlying(value) if unwrap else value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    yield underlying(item) if unwrap else item


_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_unwrapped = torch._C._functorch.get_unwrapped


def underlying(t: torch.Tensor) -> torch.Tensor:
    while _is_wrapped(t):
        t = _unwrapped(t)
    return t


def gpu_of(tensors: Any) -> int | None:
    """The one simulated GPU these tensors live on (host tensors join any), or CUDA's error."""
    found: int | None = None
    for t in tensors:
        index = devices.device_of(t)
        if index is None or index == found:
            continue
        if found is not None:
            raise mixed_devices(f"cuda:{found}", f"cuda:{index}")
        found = index
    return found


def gpu_of_call(args: tuple, kwargs: dict) -> int | None:
    """gpu_of(tensors_of(args, kwargs, unwrap=False)) without the generators: every op pays it."""
    found: int | None = None
    device_of = devices.device_of
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, torch.Tensor):
            index = device_of(value)
        elif isinstance(value, (list, tuple)):
            index = gpu_of(item for item in value if isinstance(item, torch.Tensor))
        else:
            continue
        if index is None or index == found:
            continue
        if found is not None:
            raise mixed_devices(f"cuda:{found}", f"cuda:{index}")
        found = index
    return found


def label(out: Any, index: int, inputs: list[torch.Tensor] | None = None) -> Any:
    """Put every tensor of `out` (a tensor, or a list/tuple of them) on simulated GPU `index`."""
    if type(out) in _PLAIN:
        if out.layout is _STRIDED:
            devices.adopt(out, index)
    elif isinstance(out, torch.Tensor):
        pass  # a subclass (DTensor, FakeTensor): its inner tensors are placed where they are made
    elif isinstance(out, (list, tuple)):
        for item in out:
            label(item, index)
    return out


def pairs_lists(name: str) -> bool:
    """Ops over tensor lists that pair them element by element (foreach, fused optimizers): torch's
    C++ groups tensors by their (host) device, so one call may hold several simulated GPUs. A `_fused_`
    op without a tensor list (`_fused_rms_norm`, `_fused_dropout`) is an ordinary op."""
    if name.startswith(("_foreach_", "_amp_foreach_")):
        return True
    return name.startswith("_fused_") and _takes_tensor_lists(name)


@functools.lru_cache(maxsize=None)
def _takes_tensor_lists(name: str) -> bool:
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    return not schemas or any(str(a.type) == "List[Tensor]" for s in schemas for a in s.arguments)


def _foreach(func: Callable, args: tuple, kwargs: dict) -> Any:
    """foreach ops pair their tensor lists element by element: each element keeps its own GPU."""
    lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
    places = [gpu_of(column) for column in zip(*lists)] if lists else []
    out = func(*args, **kwargs)
    if isinstance(out, (list, tuple)):
        for item, index in zip(out, places):
            if index is not None:
                label(item, index)
    return out


def _untouched(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Copies between devices, storage swaps and stream bookkeeping: no check, no new placement."""
    if _storage_less and len(args) > 1 and isinstance(args[1], torch.UntypedStorage) \
            and not storage_less(args[0]) and args[1].device.type == "meta":
        # a host tensor over a plan's storage-less storage: how UntypedStorage.copy_ reads one (a checkpoint
        # stager's host copy); its bytes are the zeros a plan reads back (cuda_sim/plan.py)
        with suspended():
            return args[0].set_(torch.zeros(args[1].nbytes(), dtype=torch.uint8).untyped_storage(), *args[2:], **kwargs)
    return func(*args, **kwargs)


def _copy(func: Callable, args: tuple, kwargs: dict) -> Any:
    """A copy between devices, untouched; in a plan, a copy from a storage-less tensor into one with data
    writes zeros there (cuda_sim/plan.py: values read back are zeros)."""
    if _storage_less and storage_less(args[1]) and not storage_less(args[0]):
        with suspended():
            return args[0].zero_()
    return func(*args, **kwargs)


def _record_stream(func: Callable, args: tuple, kwargs: dict) -> None:
    """A CPU runs in issue order: nothing to record."""
    return None


def _resolve_device(device: Any) -> Any:
    """A device argument: a simulated GPU's index, _HOST for the host, _ELSEWHERE for a device of
    torch's own (meta), None when absent."""
    if device is None:
        return None
    device = torch.device(device) if not isinstance(device, torch.device) else device
    if device.type == "cpu":
        return _HOST
    if device.type != "cuda":
        return _ELSEWHERE
    return devices.current() if device.index is None else devices.check_index(device.index)


_HOST = "host"
_ELSEWHERE = "elsewhere"  # meta: the op runs as torch has it, its result on no simulated GPU
_RANDOM_INPLACE = {aten.uniform_, aten.normal_, aten.random_, aten.bernoulli_, aten.exponential_,
                   aten.geometric_, aten.log_normal_, aten.cauchy_, aten.bernoulli, aten.multinomial,
                   aten.normal, aten.poisson, aten.randint_like, aten.rand_like, aten.randn_like}
_SPECIAL: dict[Any, Callable[[Callable, tuple, dict], Any]] = {
    aten.copy_: _copy,
    aten.set_: _untouched,
    aten.record_stream: _record_stream,
}


def has_special(packet: Any) -> bool:
    """Whether an op has a handler of its own (special)."""
    return packet in _SPECIAL


def special(packet: Any, handler: Callable[[Callable, tuple, dict], Any]) -> None:
    """Give an op a handler of its own, called with (the op's kernel, args, kwargs) instead of placement's rule."""
    _SPECIAL[packet] = handler
    _OPS.clear()


class PlacementMode(TorchDispatchMode):
    """See the module docstring."""

    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # No torch._disable_dynamo wrapper around every op (it costs more than the placement itself);
        # dynamo never runs under simulation (tensors.py: torch.compile runs eagerly).
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        # An op torch's C++ issued while the program's call was in the function mode would meet that
        # mode again when run here: the placement of an op is settled below the program's checks.
        with _NoTorchFunction():
            if _storage_less:
                return self._place_storage_less(func, types, args, kwargs)
            try:
                return self._place(func, types, args, kwargs)
            except RuntimeError as exc:
                oom = _gpu_refusal(exc, args, kwargs or {})
                if oom is None:
                    raise
                raise oom from None

    def _place_storage_less(self, func: Any, types: Any, args: tuple, kwargs: dict | None) -> Any:
        """A plan's op: its meta kernel runs seeing its tensors' own (meta) device, its result is placed
        and charged as with data, the plan prices it, and an allocation the GPU cannot hold names the op
        and the program's line."""
        with plan_host.DISPATCH:  # the simulation's own host work, not the program's (plan_host: the measured host)
            if func is _TO_COPY and "device" in (kwargs or {}) and _resolve_device(kwargs["device"]) == _HOST \
                    and storage_less(args[0]):
                # a host copy of a storage-less tensor C++ made from its storage (pickling, torch.save): zeros,
                # as the program's own .cpu() gives (tensors.py)
                plan_host.SIM.refund()
                with suspended():
                    return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype)
            _state.kernel = getattr(_state, "kernel", 0) + 1
            try:
                args, kwargs, written = _data_less_inputs(func, args, kwargs or {})
                out = self._place(func, types, args, kwargs)
                for t in written:  # an in-place op on a tensor with data, from inputs without: zeros (plan.py)
                    with suspended():
                        t.zero_()
            except torch.OutOfMemoryError as exc:
                raise _named_oom(exc, func, args) from None
            finally:
                _state.kernel -= 1
            if out is NotImplemented:
                return out
            # an in-place foreach op returns nothing: its inputs say where it ran (AdamW's foreach kernels)
            # (a foreach op may hold several GPUs' tensors: torch groups an optimizer's by what C++ sees, meta)
            on_a_gpu = _on_a_gpu(out) if out is not None else \
                devices.any_on_gpu(*tensors_of(args, kwargs or {}, unwrap=False))
            if not on_a_gpu:
                plan_host.SIM.refund()  # an op on host tensors: the box's CPU runs it too
            elif _plan_hook is not None and not getattr(_state, "suspended", 0):
                _plan_hook(func, args, kwargs or {}, out)
            return out

    def _place(self, func: Any, types: Any, args: tuple, kwargs: dict | None) -> Any:
        op = _OPS.get(func)
        if op is None:
            if isinstance(func, torch._ops.HigherOrderOperator):
                return _higher_order(func, args, kwargs or {})
            op = _OPS[func] = _Op(func)
        kwargs = kwargs or {}
        if types and _subclass_among(types):
            if infra_mode_active():  # tracing (FakeTensor, proxies, functionalization): not ours to place
                return op.run(*args, **kwargs)
            return NotImplemented  # a tensor subclass (DTensor, ...) dispatches first; its local ops come back here
        if getattr(_state, "suspended", 0):
            return op.run(*args, **kwargs)
        if op.plain:  # most ops: the results take the inputs' GPU (the general rule below, its other cases ruled out)
            target = gpu_of_call(args, kwargs)
            if target is None:
                return op.run(*args, **kwargs)
            if autocast.enabled_here():
                with autocast.inner_ops_cast():
                    return label(op.run(*args, **kwargs), target)
            return label(op.run(*args, **kwargs), target)
        if op.special is not None:
            return op.special(op.run, args, kwargs)
        if op.composite and torch.is_inference_mode_enabled() and not infra_mode_active():
            # seen whole under inference_mode: its parts, as CUDA runs them (cuBLAS, SDPA's choice)
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if op.pairs_lists:
            return _foreach(op.run, args, kwargs)
        device = kwargs.get("device") if op.has_device else None
        target = None if device is None else _resolve_device(device)
        if target == _ELSEWHERE and _storage_less and not getattr(_state, "elsewhere", 0) and not infra_mode_active():
            target = devices.current()  # C++ making a tensor on a storage-less GPU tensor's device (meta)
        elif target == _ELSEWHERE or (target is not None and target != _HOST and infra_mode_active()):
            return op.run(*args, **kwargs)  # meta; or a tracing mode below: a fake tensor on the GPU, as on CUDA
        if target == _HOST and getattr(_state, "host", 0):
            return op.run(*args, **kwargs)
        pending = getattr(_state, "random_target", None) if op.random else None
        if pending is not None:
            target = pending
        elif target is None or target == _HOST:
            # device=cpu below Python is C++ passing a simulated tensor's own (host) options on, as in
            # autograd's `grad.to(self.options())`: the result stays with the inputs. The program's
            # own host requests (.cpu(), device="cpu") are settled in tensors.py before reaching here.
            target = gpu_of_call(args, kwargs)
            if target is None and device is not None and next(tensors_of(args, kwargs, unwrap=False), None) is None:
                target = _backward_node_gpu()
                if target is None:
                    target = getattr(_state, "issued", None)
            if target is not None and device is not None and _storage_less \
                    and any(storage_less(t) for t in tensors_of(args, kwargs)):
                kwargs = {**kwargs, "device": _META}  # C++ made it from a storage-less tensor's options
        else:
            kwargs = {**kwargs, "device": factory_backing(op.run, args, kwargs) if _storage_less else _CPU}
        if target is None:
            return op.run(*args, **kwargs)
        if func is _ZERO_TENSOR:
            # autograd's zero gradients (no memory on CUDA either) made as ordinary zeros on the GPU: a labelled
            # efficient zero tensor crashed later arithmetic (a segfault in assert_close, "expand() ... found int")
            return label(aten.zeros.default(*args, **kwargs), target)
        if op.random:
            drawn = random_ops.run(func, args, kwargs, target)
            if drawn is not NotImplemented:
                return label(drawn, target)
            stream = generators.stream_for(kwargs.get("generator"), target) if op.takes_generator else None
            if stream is not None:
                return label(stream.run(lambda g: op.run(*args, **{**kwargs, "generator": g})), target)
        if autocast.enabled_here():  # CUDA autocast: the ops inside this op's kernel are cast, as on CUDA
            with autocast.inner_ops_cast():
                out = _label_outputs(op, op.run(*args, **kwargs), target)
        else:
            out = _label_outputs(op, op.run(*args, **kwargs), target)
        if op.blas is not None:  # the cuBLAS workspaces its CUDA kernel takes on first use, after its outputs
            workspaces.charge(op.blas, target, args, kwargs)
        return out


def _gpu_refusal(exc: RuntimeError, args: tuple, kwargs: dict) -> torch.OutOfMemoryError | None:
    """The host refused a GPU op's allocation before the simulated allocator saw it: CUDA's OutOfMemoryError
    where the op's GPU could not hold the request either (memory.py), so OOM guards catch what they catch on
    CUDA; None for host ops and for requests the GPU could hold (the host's own shortage)."""
    device = _resolve_device(kwargs.get("device"))
    if device in (_HOST, _ELSEWHERE):
        return None
    return refused_on(exc, device if isinstance(device, int) else gpu_of_call(args, kwargs))


def refused_on(exc: RuntimeError, index: int | None) -> torch.OutOfMemoryError | None:
    """CUDA's OutOfMemoryError for a host allocation refused while making a tensor on simulated GPU `index`,
    where that GPU could not hold it either (memory.py); None otherwise."""
    if index is None or isinstance(exc, torch.OutOfMemoryError):
        return None
    return devices.table().memory[index].refused_by_host(exc)


@functools.lru_cache(maxsize=None)
def written_positions(func: Any) -> frozenset[int]:
    """The positions of the arguments an op writes (its schema's `Tensor(a!)` ones); none for an op without
    a schema (a higher-order operator)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return frozenset()
    return frozenset(i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write)


def _data_less_inputs(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict, list[torch.Tensor]]:
    """A plan's op that mixes tensors with data and storage-less ones runs on storage-less stand-ins for the
    former (meta kernels take meta tensors and host scalars only). Returns the arguments, and the tensors
    with data the op writes (their result is zeros)."""
    if not any(storage_less(t) for t in tensors_of(args, kwargs)):
        return args, kwargs, []
    written: list[torch.Tensor] = []
    mutable = written_positions(func)
    names = [a.name for a in func._schema.arguments] if hasattr(func, "_schema") else []

    def stand_in(value: Any, position: int | None) -> Any:
        if isinstance(value, torch.Tensor):
            if type(value) in _PLAIN and not storage_less(value) and (value.dim() > 0 or devices.device_of(value) is not None):
                if position in mutable:
                    written.append(value)
                with suspended():
                    return value.to(_META)
            return value
        if isinstance(value, (list, tuple)):
            return type(value)(stand_in(v, position) for v in value)
        return value

    new_args = tuple(stand_in(a, i) for i, a in enumerate(args))
    new_kwargs = {k: stand_in(v, names.index(k) if k in names else None) for k, v in kwargs.items()}
    return new_args, new_kwargs, written


def _on_a_gpu(out: Any) -> bool:
    first = out if isinstance(out, torch.Tensor) else next((t for t in out if isinstance(t, torch.Tensor)), None) \
        if isinstance(out, (list, tuple)) else None
    return first is not None and devices.device_of(first) is not None


def _named_oom(exc: torch.OutOfMemoryError, func: Any, args: tuple) -> torch.OutOfMemoryError:
    """The allocator model's OutOfMemoryError with the op that allocated and the program's line added
    (once: an op inside another op's kernel names itself, the outer one passes it on)."""
    if getattr(exc, "_simgpu_named", False):
        return exc
    from simgpu.strict import call_site

    shapes = ", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors_of(args, {}))
    named = torch.OutOfMemoryError(f"{exc}\n(simgpu plan: allocated by {func}({shapes}) at {call_site()})")
    named._simgpu_named = True  # type: ignore[attr-defined]
    return named


def _label_outputs(op: "_Op", out: Any, target: int) -> Any:
    """The op's results on GPU `target`, except those CUDA's kernel leaves in host memory."""
    if op.host_outputs and isinstance(out, tuple):
        return tuple(item if i in op.host_outputs else label(item, target) for i, item in enumerate(out))
    return label(out, target)


_ZERO_TENSOR = aten._efficientzerotensor.default
_TO_COPY = aten._to_copy.default


def _backward_node_gpu() -> int | None:
    """The GPU of the autograd node running now, if any: a backward formula that makes a tensor from its
    input's or gradient's options and no tensor argument (zero gradients: `_efficientzerotensor`, `zeros`;
    repeat's gradient for zero repeats, normal's for a mean with a float std) gets host options here, where on
    CUDA it gets the GPU of the node's inputs. The node's saved tensors say which GPU that is; for a node that
    saves none, the inputs' producers do (a leaf's AccumulateGrad holds the leaf, other nodes their saved
    tensors, a transfer the GPU it copied to), searched breadth first up to _NODES_SEARCHED nodes and never past
    a copy between devices, whose inputs may live on another GPU.

    Only saved tensors without saved-tensor hooks are read: unpacking a hooked one runs its unpack hook,
    which for activation checkpointing recomputes the forward (a second time, inside the recompute: SAC's
    "Trying to backward an extra time", or a FakeTensor error inside a higher-order op's trace)."""
    node = torch._C._current_autograd_node()
    if node is None:
        return None
    index = _saved_gpu(node)
    if index is not None:
        return index
    queue, searched = [nxt for nxt, _ in node.next_functions], 0
    while queue and searched < _NODES_SEARCHED:
        producer = queue.pop(0)
        if producer is None:
            continue
        searched += 1
        if producer.name() == _TRANSFER:
            return producer.target  # the GPU its output, the running node's input, was copied to (None: host)
        leaf = getattr(producer, "variable", None)  # AccumulateGrad
        index = devices.device_of(leaf) if isinstance(leaf, torch.Tensor) else _saved_gpu(producer)
        if index is not None:
            return index
        if producer.name() not in _COPIES:
            queue.extend(nxt for nxt, _ in producer.next_functions)
    return None


_NODES_SEARCHED = 32
_TRANSFER = "_TransferBackward"  # tensors.py's copy between devices (`to`, `cuda`, `cpu`)
_COPIES = {"CopyBackwards", "CopySlices"}  # copy_ into a tensor, whose source may be on another GPU


def _saved_gpu(node: Any) -> int | None:
    """The GPU of a node's first saved tensor that is on one (hooked saved tensors are not read)."""
    for name in dir(node):
        if not name.startswith("_saved_") or _hooked(node, name):
            continue
        try:
            with _python_dispatch._disable_current_modes():  # the unpack's detach is not the program's op: a
                saved = getattr(node, name)                   # FakeTensorMode (DTensor's propagation) refuses it
        except (RuntimeError, AssertionError):  # freed after an earlier backward; a mode's refusal
            continue
        for t in saved if isinstance(saved, (list, tuple)) else (saved,):
            if isinstance(t, torch.Tensor):
                index = devices.device_of(t)
                if index is not None:
                    return index
    return None


def _hooked(node: Any, name: str) -> bool:
    """Whether reading the node's saved value `name` would run a saved-tensor unpack hook (torch's
    SavedTensor says so from 2.5 or so; on older torch, as on values that are not tensors, False)."""
    raw = getattr(node, "_raw" + name, None)
    return any(getattr(r, "unpack_hook", None) is not None for r in (raw if isinstance(raw, (list, tuple)) else (raw,)))


class _Op:
    """What placement needs to know of an aten overload, worked out once."""

    __slots__ = ("run", "special", "pairs_lists", "has_device", "random", "takes_generator", "blas", "host_outputs",
                 "composite", "plain")

    def __init__(self, func: Any):
        packet = func.overloadpacket
        arguments = {a.name for a in func._schema.arguments}
        # the C++ entry point, without OpOverload.__call__'s frame; for ops torch has only for CUDA, a stand-in
        self.run = (None if _storage_less and _has_meta_kernel(func) else STAND_INS.get(packet)) \
            or getattr(func, "_op", func)  # a plan runs CUDA-only ops' meta kernels: no stand-in's host math
        self.special = _SPECIAL.get(packet)
        self.pairs_lists = pairs_lists(packet.__name__)
        self.has_device = "device" in arguments
        self.takes_generator = "generator" in arguments
        self.random = (packet in _RANDOM_INPLACE and self.takes_generator) or packet.__name__ in random_ops.PACKETS
        self.blas = packet if packet in workspaces.CUBLAS_OPS else None
        self.host_outputs = getattr(self.run, "host_outputs", ())  # a stand-in's outputs CUDA keeps on the host
        # torch decomposes these in C++ above this mode, except where autograd's keys are off (inference_mode)
        self.composite = packet not in STAND_INS and _has_composite_kernel(func)
        # none of the above: the inputs' GPU is the whole rule (decided once per overload, not per call)
        self.plain = not (self.special is not None or self.pairs_lists or self.has_device or self.random
                          or self.blas is not None or self.host_outputs or self.composite or func is _ZERO_TENSOR)


_DISPATCHING: dict[Any, bool] = {}  # a dispatch call's `types` -> whether a tensor subclass is among them


def _subclass_among(types: Any) -> bool:
    """Whether a tensor subclass with a __torch_dispatch__ of its own is among an op's argument types (cached:
    the same few tuples come back on every op)."""
    try:
        known = _DISPATCHING.get(types)
    except TypeError:  # not hashable
        known = None
        types = tuple(types)
    if known is None:
        known = _DISPATCHING[types] = any(getattr(t, "__torch_dispatch__", _NO_DISPATCH) is not _NO_DISPATCH
                                          for t in types)
    return known


_OPS: dict[Any, _Op] = {}
_COMPOSITE_KEY = torch._C.DispatchKey.CompositeImplicitAutograd


def _has_meta_kernel(func: Any) -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "Meta")
    except RuntimeError:
        return False


def _has_composite_kernel(func: Any) -> bool:
    """Whether the C++ dispatcher has a CompositeImplicitAutograd kernel for `func`. Overloads that exist only
    in Python (aten::sym_stride, TorchScript's prim::device) are no registered operator: asking raises."""
    try:
        return func.has_kernel_for_dispatch_key(_COMPOSITE_KEY)
    except RuntimeError:
        return False


_HOP_KEYS = [getattr(torch._C.DispatchKey, name) for name in ("CUDA", "CompositeExplicitAutograd", "CPU", "BackendSelect")]


def _higher_order(func: Any, args: tuple, kwargs: dict) -> Any:
    """A higher-order operator (flex_attention, control flow, DTensor's random ops, checkpoint tags): run
    its GPU (or generic) implementation so the aten ops inside it are placed.

    Most kernels run with placement on. Those that refuse any dispatch mode (torch.cond's, scan's: "Mode
    should never be enabled for CPU/CUDA key", torch's contract for the dense key) run bare, as torch runs
    them, with placement re-entered in the functions they call (branches, bodies); their results take
    the operands' GPU."""
    for key in _HOP_KEYS:
        kernel = func.py_kernels.get(key)
        if kernel is None:
            continue
        if _refuses_modes(kernel):
            index = gpu_of(t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
            args, kwargs = pytree.tree_map_only(_BODY, _placed, (args, kwargs))
            out = func.dispatch(key, *args, **kwargs)
            return out if index is None else pytree.tree_map_only(torch.Tensor, lambda t: label(t, index), out)
        with PlacementMode():
            return func.dispatch(key, *args, **kwargs)
    raise NotImplementedError(f"simgpu: the higher-order operator {func.name()} has no implementation the "
                              f"simulated GPUs can run")


_BODY = (types.FunctionType, types.MethodType, functools.partial, torch.nn.Module)


def _placed(fn: Callable) -> Callable:
    """`fn` run with placement on (a higher-order operator's branch or body)."""
    def placed(*args: Any, **kwargs: Any) -> Any:
        with PlacementMode():
            return fn(*args, **kwargs)

    return placed


@functools.lru_cache(maxsize=None)
def _refuses_modes(kernel: Callable) -> bool:
    """Whether a higher-order operator's kernel asserts that no dispatch mode is active (torch's words)."""
    code = getattr(kernel, "__code__", None)
    return code is not None and any(isinstance(c, str) and c.startswith("Mode should never be enabled")
                                    for c in code.co_consts)


_INFRA_MODES = tuple(getattr(torch._C._TorchDispatchModeKey, name) for name in ("FAKE", "PROXY", "FUNCTIONAL")
                     if hasattr(torch._C._TorchDispatchModeKey, name))


def program_mode_active() -> bool:
    """Whether a dispatch mode of the program's own (LocalTensorMode, CommDebugMode), not a tracer's, is
    active: it sees a factory's `device=` before placement does, and on CUDA that device is the GPU."""
    if torch._C._len_torch_dispatch_stack() == 0:
        return False
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(not isinstance(m, PlacementMode) and not m.is_infra_mode() for m in _get_current_dispatch_mode_stack())


def infra_mode_active() -> bool:
    """Whether torch is tracing here (FakeTensorMode, proxies, functionalization): shapes, not memory."""
    return any(torch._C._get_dispatch_mode(key) is not None for key in _INFRA_MODES)


def enter() -> None:
    """Make the calling thread place every op's results (the autograd engine inherits it)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    if not any(isinstance(m, PlacementMode) for m in _get_current_dispatch_mode_stack()):
        _state.mode = PlacementMode()  # one per thread (a mode keeps per-entry state), kept alive here:
        _state.mode.__enter__()        # torch 2.4's mode stack does not hold its own reference

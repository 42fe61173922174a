"""Simulated CUDA devices: how many there are, which one is current, and which tensor lives where.

A tensor on a simulated GPU is an ordinary CPU tensor whose storage carries a device label
(`_simgpu_device`, the logical index). Labelling the storage rather than the Python object is
what makes views, `.data`, `detach()` and `nn.Parameter` share their base's device, as on CUDA.
torch keeps one Python object per storage, so the label lives as long as the storage does.

The set of devices is fixed at first use, the way CUDA reads CUDA_VISIBLE_DEVICES once at
initialisation: `SIMGPU_GPUS` physical devices, filtered and reordered by CUDA_VISIBLE_DEVICES, or by
SIMGPU_VISIBLE_DEVICES where that is set: on a host with real GPUs, a simulated run can hide them from
the CUDA driver (CUDA_VISIBLE_DEVICES=, so that nothing the simulation misses reaches a real GPU) and
still name its simulated ones.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from simgpu.cuda_sim import memory as memory_model
from simgpu.cuda_sim import memory_history, plan_host
from simgpu.cuda_sim.errors import GPUS_ENV, SimulationError

LABEL = "_simgpu_device"
MEMORY_ENV = "SIMGPU_GPU_MEMORY_GB"
VISIBLE_ENV = "SIMGPU_VISIBLE_DEVICES"  # the simulated GPUs' CUDA_VISIBLE_DEVICES, where it must differ from the driver's
DEFAULT_MEMORY_GB = memory_model.DEFAULT_CAP_GB  # the most a simulated GPU reports unless asked (an H200's HBM)


# What CUDA builds raise for a CUDA error: torch.AcceleratorError (a RuntimeError) where torch has it
# (seen on torch 2.11 for an invalid device ordinal), RuntimeError before.
CUDA_ERROR: type = getattr(torch, "AcceleratorError", RuntimeError)


@dataclass
class DeviceTable:
    """The process's view of the simulated machine."""

    physical: int
    visible: list[int]  # logical index -> physical index
    total_memory: int
    memory: list[memory_model.DeviceMemory] = field(default_factory=list)  # per logical device
    host: memory_model.HostGuard = field(default_factory=memory_model.HostGuard)

    def __post_init__(self) -> None:
        self.memory = [memory_model.DeviceMemory(i, self.total_memory) for i in range(len(self.visible))]

    @property
    def count(self) -> int:
        return len(self.visible)


def parse_visible(spec: str | None, physical: int) -> list[int]:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: indices in the given order, stopping at the first
    entry that is not a valid, unused index (an empty string hides every device)."""
    if spec is None:
        return list(range(physical))
    visible: list[int] = []
    for entry in spec.split(","):
        entry = entry.strip()
        if entry.startswith("GPU-"):
            index = _index_of_uuid(entry, physical)
        else:
            try:
                index = int(entry)
            except ValueError:
                break
        if index is None or not 0 <= index < physical or index in visible:
            break
        visible.append(index)
    return visible


def visible_spec() -> str | None:
    """What filters the simulated GPUs: SIMGPU_VISIBLE_DEVICES if set (same syntax), else CUDA_VISIBLE_DEVICES."""
    spec = os.environ.get(VISIBLE_ENV)
    return spec if spec is not None else os.environ.get("CUDA_VISIBLE_DEVICES")


def uuid_of(physical_index: int) -> str:
    """A stable fake UUID per physical simulated GPU, so CUDA_VISIBLE_DEVICES=GPU-... works."""
    return f"GPU-5133c0de-0000-4000-8000-{physical_index:012d}"


def _index_of_uuid(entry: str, physical: int) -> int | None:
    matches = [i for i in range(physical) if uuid_of(i).startswith(entry)]
    return matches[0] if len(matches) == 1 else None


_table: DeviceTable | None = None
_table_lock = threading.Lock()
_current = threading.local()


def table() -> DeviceTable:
    """The device table, built on first use from the environment."""
    global _table
    if _table is None:
        with _table_lock:
            if _table is None:
                physical = int(os.environ.get(GPUS_ENV, "0") or 0)
                asked = os.environ.get(MEMORY_ENV)
                memory = int(float(asked) * 2**30) if asked else memory_model.default_capacity(physical)
                _table = DeviceTable(physical, parse_visible(visible_spec(), physical), memory)
    return _table


def reset_table() -> None:
    """Forget the table (tests, and a process that changes SIMGPU_GPUS before first use)."""
    global _table
    _table = None
    _current.__dict__.clear()


def count() -> int:
    return table().count


def check_index(index: int) -> int:
    """A logical device index that exists, or the error CUDA gives, with the simulator's numbers."""
    n = count()
    if not isinstance(index, int) or not 0 <= index < n:
        raise CUDA_ERROR(f"CUDA error: invalid device ordinal (simgpu: cuda:{index} requested, "
                         f"{n} simulated GPU{'s' if n != 1 else ''} visible; simgpu run --gpus N sets how many)")
    return index


_initialized = False


def initialized() -> bool:
    """Whether the program has used a GPU yet (CUDA initialises lazily)."""
    return _initialized


def mark_initialized() -> None:
    global _initialized
    if count() == 0:
        raise RuntimeError("No CUDA GPUs are available (simgpu: 0 simulated GPUs visible)")
    _initialized = True


def current() -> int:
    """The calling thread's current device (CUDA's is per thread and starts at 0)."""
    index = getattr(_current, "index", 0)
    if not _initialized:
        mark_initialized()
    return index


def set_current(index: int) -> None:
    _current.index = check_index(index)
    mark_initialized()


class _ThreadStreams(threading.local):
    """GPU -> the stream the calling thread made current there (api.Stream), None while it is the default
    stream. CUDA's current stream is per thread, as the current device is: one thread's
    `with torch.cuda.stream(s)` leaves the other threads on theirs (FSDP's streams in threaded tests).
    The caching allocator keeps each stream's blocks apart, so allocations are charged to the current
    stream's pools."""

    def __init__(self) -> None:
        self.by_gpu: dict[int, Any] = {}

    def get(self, index: int, default: Any = None) -> Any:
        return self.by_gpu.get(index, default)

    def __setitem__(self, index: int, stream: Any) -> None:
        self.by_gpu[index] = stream


current_streams = _ThreadStreams()


def stream_key(index: int) -> int:
    """Which of GPU `index`'s streams allocations are charged to now: 0 for the default stream."""
    stream = current_streams.get(index)
    return 0 if stream is None else id(stream)


def resolve(device: Any) -> int | None:
    """The logical index a device argument means, or None when it is not a CUDA device.

    Accepts what torch accepts where a device goes: torch.device, "cuda", "cuda:1", an int
    (a CUDA index in torch.cuda APIs and in factories' device=), None is not handled here.
    """
    if isinstance(device, int) and not isinstance(device, bool):
        return check_index(device)
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            return None
        return current() if device.index is None else check_index(device.index)
    return None


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_is_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_functorch_unwrapped = torch._C._functorch.get_unwrapped


_mode_on = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: True)
_NoTorchFunction = torch._C.DisableTorchFunction


def device_of(t: torch.Tensor) -> int | None:
    """The simulated GPU a tensor lives on, or None for host memory.

    A tensor subclass that wraps others (DTensor, AsyncCollectiveTensor, ...) lives where the first
    tensor it wraps lives (its __tensor_flatten__ names them), as torch builds such wrappers."""
    if _is_functorch_wrapped(t):  # vmap's batched tensors, grad's: where the tensor they wrap lives
        return device_of(innermost(t))
    try:
        if type(t) in _PLAIN and _mode_on():
            # called in the program's context (`t.device`, `p.grad`): the method went through every torch
            # function mode on the stack (simgpu's own among them, 0.5 us) to return what C++ returns
            with _NoTorchFunction():
                storage = t.untyped_storage()
        else:
            storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested, meta wrappers: host semantics
        return None
    index = getattr(storage, LABEL, None)
    if index is None and type(t) not in _PLAIN:
        fake = getattr(t, "fake_device", None)  # FakeTensor: metadata on a GPU (tensors._make_subclass)
        if fake is not None:
            return fake.index if fake.type == "cuda" else None
    if index is None and type(t) not in _PLAIN and hasattr(t, "__tensor_flatten__"):
        try:
            names, _ = t.__tensor_flatten__()
        except Exception:  # noqa: BLE001 - a subclass that cannot say what it wraps: host semantics
            return None
        inner = getattr(t, names[0], None) if names else None
        if isinstance(inner, torch.Tensor) and inner is not t:
            return device_of(inner)
    return index


def innermost(t: torch.Tensor) -> torch.Tensor:
    """The tensor functorch's wrappers (vmap, grad) wrap, however deep: the one with a storage."""
    while _is_functorch_wrapped(t):
        t = _functorch_unwrapped(t)
    return t


def place(t: torch.Tensor, index: int | None) -> torch.Tensor:
    """Put `t`'s storage on simulated device `index` (None: host), accounting its memory."""
    storage = innermost(t).untyped_storage()
    old = getattr(storage, LABEL, None)
    if old == index:
        return t
    if old is not None:
        raise SimulationError(f"simgpu: a storage on cuda:{old} cannot be relabelled cuda:{index}")
    if index is not None:
        account(storage, index)  # first: an allocation the GPU cannot hold raises OutOfMemoryError unlabelled
        mark_initialized() if not _initialized else None
    setattr(storage, LABEL, index)
    return t


_HOST_GRAD = "_simgpu_host_grad"


def mark_host_grad(grad: torch.Tensor) -> None:
    """`grad` was given, on the host, to a host parameter: it is the program's host memory, not a
    gradient C++ made from a simulated parameter's host options, so reading `.grad` must not move it."""
    if grad.layout is torch.strided:
        setattr(grad.untyped_storage(), _HOST_GRAD, True)


def host_grad(grad: torch.Tensor) -> bool:
    """Whether mark_host_grad marked `grad`'s storage."""
    return grad.layout is torch.strided and getattr(grad.untyped_storage(), _HOST_GRAD, False)


def adopt(t: torch.Tensor, index: int) -> torch.Tensor:
    """Put `t`'s storage on simulated GPU `index` unless it is there already; a host storage moves
    (C++ makes tensors from a simulated tensor's host options), one on another GPU is an error."""
    storage = (innermost(t) if _is_functorch_wrapped(t) else t).untyped_storage()
    old = getattr(storage, LABEL, None)
    if old == index:
        return t
    if old is not None:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"cuda:{index} and cuda:{old}!")
    account(storage, index)
    setattr(storage, LABEL, index)
    mark_initialized() if not _initialized else None
    return t


class _Allocation:
    """Held by a storage on a simulated GPU: holds its block of the allocator model until the storage is
    freed (cheaper than a weakref.finalize, and every op's result makes one)."""

    __slots__ = ("index", "block", "nbytes", "stream")

    def __init__(self, index: int, block: memory_model.Block | None, nbytes: int, stream: int):
        self.index, self.block, self.nbytes, self.stream = index, block, nbytes, stream

    def __del__(self) -> None:
        if plan_host.SIM.active:
            with plan_host.SIM:  # the allocator model's work, not the program's (a plan's measured host)
                self.release()
        else:
            self.release()

    def release(self) -> None:
        if self.block is not None and _table is not None and self.index < len(_table.memory):
            _table.memory[self.index].free(self.block, self.nbytes, self.stream)
        self.block = None


class _RecordedAllocation(_Allocation):
    """An allocation made while torch.cuda.memory._record_memory_history records: its free is traced too."""

    __slots__ = ()

    def release(self) -> None:
        recorder = memory_history.recorder
        if self.block is not None and recorder is not None:
            recorder.free(self.index, self.block, self.nbytes, self.stream)
        super().release()


def account(storage: Any, index: int) -> None:
    """Charge a storage now living on simulated GPU `index` what the CUDA caching allocator would, until
    it is freed (torch.cuda.OutOfMemoryError when the GPU cannot hold it; simgpu.cuda_sim.memory)."""
    t = _table or table()
    nbytes = storage.nbytes()
    current_stream = current_streams.by_gpu.get(index)
    stream = 0 if current_stream is None else id(current_stream)  # stream_key(index), on every op's path
    recorder = memory_history.recorder
    if recorder is None:
        block = t.memory[index].allocate(nbytes, stream)
        storage._simgpu_allocation = _Allocation(index, block, nbytes, stream)
    else:  # torch.cuda.memory._record_memory_history is on
        block = recorder.allocate(t.memory[index], nbytes, stream)
        storage._simgpu_allocation = _RecordedAllocation(index, block, nbytes, stream)
    if block is not None:
        t.host.grew(block.size)


def any_on_gpu(*values: Any) -> bool:
    """Whether any of `values` is a (non-nested) tensor on a simulated GPU: a Python kernel registered ahead of
    torch's composite (attention.py, rms_norm.py) takes CUDA's path for these, the host's otherwise."""
    return any(isinstance(v, torch.Tensor) and not v.is_nested and device_of(v) is not None for v in values)


def hand_over(old: Any, new: Any) -> None:
    """Storage `new` takes the place of `old` (a plan's storage-less buffer given a received message's bytes,
    plan_roles.py): `old`'s simulated GPU and its allocation, charged once, freed when `new` is."""
    allocation = getattr(old, "_simgpu_allocation", None)
    if allocation is not None:
        new._simgpu_allocation = allocation
        del old._simgpu_allocation
    setattr(new, LABEL, getattr(old, LABEL, None))


def recharge(storage: Any, index: int) -> None:
    """A storage on simulated GPU `index` changed size in place (`UntypedStorage.resize_`, as FSDP2 frees
    and refills its unsharded parameters): its old block goes back to the allocator, the new size is charged."""
    old = getattr(storage, "_simgpu_allocation", None)
    if old is not None:
        old.release()
    account(storage, index)


def memory_of(index: int) -> memory_model.DeviceMemory:
    """The allocator model of simulated GPU `index` (its statistics, its cache, its capacity)."""
    return table().memory[check_index(index)]


def memory_allocated(index: int) -> int:
    return memory_of(index).total_allocated()


def max_memory_allocated(index: int) -> int:
    return memory_of(index).peak_allocated


def reset_peak(index: int) -> None:
    memory_of(index).reset_peaks()

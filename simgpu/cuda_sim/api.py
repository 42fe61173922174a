"""torch.cuda (and torch.accelerator) as a program sees them on N simulated GPUs.

Device queries, the per-thread current device and its context managers, streams and events (ops run
on the host at issue; each stream keeps a clock that only `torch.cuda._sleep` moves ahead of the host,
and events, waits and synchronize follow those clocks: stream_clocks.py), per-device random generators,
and memory statistics counted from the storages that live on each simulated device. What has no CPU meaning (CUDA graphs, custom kernels, IPC)
raises SimulationError with one line naming it.
"""
from __future__ import annotations

import collections
import contextlib
import importlib
import importlib.util
import itertools
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from simgpu.cuda_sim import (attention, devices, generators, gpu_model, graphs, legacy_types, memory_history,
                             profiling, stream_clocks)
from simgpu.cuda_sim.devices import SimulationError

CAPABILITY = gpu_model.CAPABILITY


def _index(device: Any = None, optional: bool = True) -> int:
    """A torch.cuda-style device argument (None, int, str, torch.device) as a logical index."""
    if device is None:
        return devices.current()
    if isinstance(device, torch.device) and device.type == "cuda" and device.index is None:
        return devices.current()
    index = devices.resolve(device)
    if index is None:
        raise ValueError(f"Expected a cuda device, but got: {device}")
    return index


def is_available() -> bool:
    return devices.count() > 0


def device_count() -> int:
    return devices.count()


def current_device() -> int:
    return devices.current()


def set_device(device: Any) -> None:
    if isinstance(device, (str, torch.device)) and _TorchDevice(device).type == "cuda" and _TorchDevice(device).index is None:
        # torch.cuda.set_device("cuda") names no GPU: CUDA's torch refuses it (torch._utils._get_device_index)
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{_TorchDevice(device)}")
    index = devices.resolve(device) if device is not None else None
    if isinstance(device, int) and device < 0:  # torch.cuda.set_device(-1) is a no-op
        return
    if index is None:
        raise ValueError(f"Expected a cuda device, but got: {device}")
    devices.set_current(index)


class device:
    """`with torch.cuda.device(i):` makes i the current device of this thread, then restores it."""

    def __init__(self, device: Any):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = devices.current()
            devices.set_current(self.idx)

    def __exit__(self, *exc: Any) -> bool:
        if self.idx >= 0:
            devices.set_current(self.prev_idx)
        return False


class device_of(device):
    """`with torch.cuda.device_of(tensor):` the tensor's device, or nothing for host tensors."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.is_cuda else None)


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    uuid: str
    pci_bus_id: int
    is_integrated: bool = False
    is_multi_gpu_board: bool = False
    L2_cache_size: int = 60 * 2**20
    warp_size: int = 32
    max_threads_per_multi_processor: int = gpu_model.MAX_THREADS_PER_MULTI_PROCESSOR


def get_device_properties(device: Any = None) -> DeviceProperties:
    index = _index(device)
    table = devices.table()
    physical = table.visible[index]
    return DeviceProperties(name=get_device_name(index), major=CAPABILITY[0], minor=CAPABILITY[1],
                            total_memory=table.total_memory,
                            multi_processor_count=gpu_model.MULTI_PROCESSOR_COUNT,
                            uuid=devices.uuid_of(physical), pci_bus_id=physical)


def get_device_name(device: Any = None) -> str:
    physical = devices.table().visible[_index(device)]
    return f"simgpu simulated GPU {physical}"


def get_device_capability(device: Any = None) -> tuple[int, int]:
    _index(device)
    return CAPABILITY


def synchronize(device: Any = None) -> None:
    """The host waits until every stream of the device has ended its work (only `_sleep` puts any ahead;
    a plan's timeline moves the host to the end of its GPU's work)."""
    graphs.refuse_inside_capture("torch.cuda.synchronize()")
    stream_clocks.host_wait(stream_clocks.device_ready_at(_index(device)))
    from simgpu.cuda_sim import plan

    if plan.RECORDER is not None:
        plan.RECORDER.host_waits("all")


SLEEP_CYCLES_PER_MS = 1_980_000  # an H100/H200 SXM's SM clock at boost, 1980 MHz


def _sleep(cycles: int) -> None:
    """torch.cuda._sleep: a kernel that spins for `cycles` GPU clock cycles, which PyTorch's tests put on
    streams to stand for compute or communication time (FSDP's delays, get_cycles_per_ms). It moves the
    current stream's clock on by as long as the GPU would spin and returns at once, as a kernel launch does:
    sleeps on two streams overlap, and the host waits only where it synchronizes (stream_clocks.py). Its
    launch is the moment of the call: the simulator's bookkeeping after it would otherwise count as GPU idle
    time between an event and the sleep, and get_cycles_per_ms would calibrate sleeps short."""
    launched = stream_clocks.host_now()
    if isinstance(cycles, bool) or not isinstance(cycles, int):
        raise TypeError(f"_cuda_sleep(): argument 'cycles' must be int, not {type(cycles).__name__}")
    devices.mark_initialized()
    if cycles > 0:
        stream_clocks.spin(current_stream(), cycles / SLEEP_CYCLES_PER_MS / 1000.0, launched)


def _event_base() -> type:
    """torch 2.4's dynamo requires torch.cuda.Event to derive from its abstract _EventBase."""
    try:
        from torch._streambase import _EventBase
    except ImportError:
        return object
    import abc

    return _EventBase if abc.ABC in _EventBase.__mro__ else object


_handles = itertools.count(0x7F0000001000, 0x100)  # what cudaStreamCreate / cudaEventCreate hand out: distinct, nonzero


class Event(_event_base()):  # type: ignore[misc]
    """A CUDA event: recording takes its stream's clock (when the stream's earlier work ends, stream_clocks.py),
    so it is complete once the host reaches that time. As on CUDA, it has no handle, id or device until first
    recorded."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 **_: Any):
        if interprocess:
            raise SimulationError("simgpu: interprocess CUDA events (IPC) are not simulated")
        self.enable_timing = enable_timing
        self.recorded_at: float | None = None
        self.cuda_event = 0
        self._device: torch.device | None = None

    @property
    def event_id(self) -> int:
        return self.cuda_event

    @property
    def device(self) -> torch.device | None:
        return self._device

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: Any) -> "Event":
        raise SimulationError("simgpu: torch.cuda.Event.from_ipc_handle cannot run on simulated GPUs: "
                              "interprocess CUDA events (IPC) are not simulated")

    def ipc_handle(self) -> bytes:
        raise getattr(torch, "AcceleratorError", RuntimeError)("CUDA error: invalid resource handle (simgpu: only an interprocess event has "
                                     "an IPC handle, and those are not simulated)")

    def record(self, stream: Any = None) -> None:
        stream = stream or current_stream()
        self.recorded_at = stream_clocks.ready_at(stream)
        if not self.cuda_event:
            self.cuda_event = next(_handles)
            self._device = torch.device("cuda", stream.index)

    def wait(self, stream: Any = None) -> None:
        (stream or current_stream()).wait_event(self)

    def query(self) -> bool:
        return stream_clocks.done(self.recorded_at)

    def synchronize(self) -> None:
        stream_clocks.host_wait(self.recorded_at)

    def elapsed_time(self, end_event: "Event") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.recorded_at is None or end_event.recorded_at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return (end_event.recorded_at - self.recorded_at) * 1000.0


def _stream_bases() -> tuple[type, ...]:
    """torch.Stream, and on torch 2.4 the abstract _StreamBase its dynamo requires of torch.cuda.Stream."""
    try:
        from torch._streambase import _StreamBase
    except ImportError:
        return (torch.Stream,)
    import abc

    return (torch.Stream, _StreamBase) if abc.ABC in _StreamBase.__mro__ else (torch.Stream,)


STREAM_PRIORITIES = (0, -3)  # Stream.priority_range() on an H200 (torch 2.11): PyTorch's range, not CUDA's


class Stream(*_stream_bases()):  # type: ignore[misc]
    """A stream of a simulated GPU. Its ops run on the host at issue; its clock (`gpu_clock`, stream_clocks.py)
    is when its work ends, ahead of the host only after `_sleep`. `with stream:` makes the stream's device
    current, as on CUDA."""

    def __new__(cls, device: Any = None, priority: int = 0, **_: Any) -> "Stream":
        return super().__new__(cls, device=torch.device("cpu"))

    def __init__(self, device: Any = None, priority: int = 0, _default: bool = False, **_: Any):
        self.index = _index(device)
        least, greatest = STREAM_PRIORITIES
        self.priority = min(least, max(greatest, priority))  # out of range: the nearest valid one, as CUDA
        self.cuda_stream = 0 if _default else next(_handles)
        self._previous: list[tuple[int, Stream]] = []
        self.gpu_clock = 0.0

    @staticmethod
    def priority_range() -> tuple[int, int]:
        return STREAM_PRIORITIES

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", self.index)

    @property
    def device_index(self) -> int:  # type: ignore[override]
        return self.index

    @property
    def device_type(self) -> int:  # type: ignore[override]
        return 1  # DeviceType::CUDA

    def wait_stream(self, stream: Any) -> None:
        stream_clocks.wait_until(self, stream.gpu_clock)

    def wait_event(self, event: Any) -> None:
        stream_clocks.wait_until(self, event.recorded_at)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return stream_clocks.done(self.gpu_clock)

    def synchronize(self) -> None:
        stream_clocks.host_wait(self.gpu_clock)

    def __enter__(self) -> "Stream":
        self._previous.append((devices.current(), devices.current_streams.get(self.index)))
        devices.set_current(self.index)
        set_stream(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        previous_device, previous_stream = self._previous.pop()
        devices.current_streams[self.index] = previous_stream
        devices.set_current(previous_device)

    def __eq__(self, other: Any) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<simgpu Stream device=cuda:{self.index} {id(self):#x}>"


_default_streams: dict[int, Stream] = {}


def default_stream(device: Any = None) -> Stream:
    index = _index(device)
    if index not in _default_streams:
        _default_streams[index] = Stream(index, _default=True)
    return _default_streams[index]


def current_stream(device: Any = None) -> Stream:
    index = _index(device)
    return devices.current_streams.get(index) or default_stream(index)


stream_clocks.current_stream = current_stream  # collectives order their stream clocks (backend.SimWork)


def set_stream(stream: Stream) -> None:
    if stream is not None:
        default = _default_streams.get(stream.index)
        devices.current_streams[stream.index] = None if stream is default else stream


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    if s is None:
        yield
        return
    with s:
        yield


# ---- random numbers: one generator per simulated device (generators.py) ----
def generator(index: int) -> generators.CudaGenerator:
    return generators.default(index)


def manual_seed(seed: int) -> None:
    generator(devices.current()).manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    for index in range(devices.count()):
        generator(index).manual_seed(seed)


def seed() -> None:
    generator(devices.current()).seed()


def seed_all() -> None:
    chosen = generator(devices.current()).seed()
    manual_seed_all(chosen)


def initial_seed() -> int:
    return generator(devices.current()).initial_seed()


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    return generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    generator(_index(device)).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [generator(i).get_state() for i in range(devices.count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        generator(index).set_state(state)


# ---- memory: the caching allocator's model of each simulated device (simgpu.cuda_sim.memory) ----
def memory_allocated(device: Any = None) -> int:
    return devices.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    return devices.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    return devices.memory_of(_index(device)).total_reserved()


def max_memory_reserved(device: Any = None) -> int:
    return devices.memory_of(_index(device)).peak_reserved


def reset_peak_memory_stats(device: Any = None) -> None:
    devices.reset_peak(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) as cudaMemGetInfo: what this process has reserved is not free."""
    mem = devices.memory_of(_index(device))
    return max(mem.capacity - mem.total_reserved(), 0), mem.capacity


def memory_stats(device: Any = None) -> dict[str, int]:
    """The keys of CUDA's caching-allocator statistics programs read, from the allocator model."""
    stats = devices.memory_of(_index(device)).stats()
    return collections.OrderedDict(sorted(stats.items()))  # CUDA's type, sorted as CUDA sorts its keys


_TORCH_MEMORY_SUMMARY = torch.cuda.memory.memory_summary  # torch's own table, over memory_stats below


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """CUDA's table (torch formats it from memory_stats, which reads the allocator model)."""
    return _TORCH_MEMORY_SUMMARY(_index(device), abbreviated)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    devices.memory_of(_index(device)).reset_accumulated()


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    index = _index(device)
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    devices.memory_of(index).fraction = fraction


def can_device_access_peer(device: Any, peer_device: Any) -> bool:
    return _index(device) != _index(peer_device)  # one NVLink domain, as on an H200 box


def empty_cache() -> None:
    if devices.initialized():
        for index in range(devices.count()):
            devices.memory_of(index).empty_cache()


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def is_initialized() -> bool:
    """False until the program first uses a GPU, as CUDA's lazy initialisation (DeviceMesh sets each
    rank's device only while this is False)."""
    return devices.initialized()


def init() -> None:
    devices.mark_initialized()


def _lazy_init() -> None:
    devices.mark_initialized()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True  # compute capability 9.0


def is_tf32_supported() -> bool:
    return True




def check_error(res: int) -> None:
    """torch.cuda.check_error: CudaError for a non-zero CUDA status (CUDA's message table is not here)."""
    if res != 0:
        error = torch.cuda.CudaError.__new__(torch.cuda.CudaError)
        RuntimeError.__init__(error, f"CUDA error code {res} (simgpu: a simulated GPU has no CUDA runtime to name it)")
        raise error


def _idle_percent(device: Any = None) -> int:
    """nvidia-smi's busy percentages: a simulated GPU runs no kernels, so 0."""
    _index(device)
    return 0
_sync_debug_mode = [0]
_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def _set_sync_debug_mode(mode: int | str) -> None:
    """CUDA's synchronisation debug mode is kept and reported; a CPU never synchronises with a device."""
    if isinstance(mode, str):
        if mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        mode = _SYNC_DEBUG_MODES[mode]
    _sync_debug_mode[0] = int(mode)


def _nested(stats: dict[str, Any]) -> dict[str, Any]:
    """memory_stats' flat 'a.b.c' keys as CUDA's nested dictionary."""
    nested: dict[str, Any] = {}
    for key, value in stats.items():
        *path, last = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def _host_memory_stats() -> "collections.OrderedDict[str, int]":
    """Pinned host memory is ordinary host memory here: the pinned allocator holds nothing."""
    return collections.OrderedDict(sorted(
        (f"{kind}.{stat}", 0) for kind in ("allocations", "allocated_bytes", "active_requests", "active_bytes")
        for stat in ("current", "peak", "allocated", "freed")))


TORCH_CUDA = {
    "is_available": is_available, "device_count": device_count, "current_device": current_device,
    "set_device": set_device, "device": device, "device_of": device_of,
    "get_device_properties": get_device_properties, "get_device_name": get_device_name,
    "get_device_capability": get_device_capability, "synchronize": synchronize,
    "Event": Event, "Stream": Stream, "default_stream": default_stream, "current_stream": current_stream,
    "set_stream": set_stream, "stream": stream, "manual_seed": manual_seed,
    "manual_seed_all": manual_seed_all, "seed": seed, "seed_all": seed_all, "initial_seed": initial_seed,
    "get_rng_state": get_rng_state, "set_rng_state": set_rng_state, "get_rng_state_all": get_rng_state_all,
    "set_rng_state_all": set_rng_state_all, "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated, "reset_peak_memory_stats": reset_peak_memory_stats,
    "memory_reserved": memory_reserved, "max_memory_reserved": max_memory_reserved,
    "mem_get_info": mem_get_info, "empty_cache": empty_cache, "is_initialized": is_initialized, "init": init,
    "_lazy_init": _lazy_init, "_sleep": _sleep, "is_bf16_supported": is_bf16_supported, "is_tf32_supported": is_tf32_supported,
    "get_arch_list": lambda: ["sm_90"], "is_current_stream_capturing": graphs.is_current_stream_capturing,
    "CUDAGraph": graphs.CUDAGraph, "graph_pool_handle": graphs.graph_pool_handle,
    "memory_stats": memory_stats, "memory_summary": memory_summary,
    "set_per_process_memory_fraction": set_per_process_memory_fraction, "ipc_collect": _nothing,
    "reset_max_memory_allocated": reset_peak_memory_stats, "reset_max_memory_cached": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats, "memory_cached": memory_reserved,
    "max_memory_cached": max_memory_reserved, "can_device_access_peer": can_device_access_peer,
    "check_error": check_error, "_lazy_call": lambda callable, **kwargs: callable(),  # simulated GPUs are ready at once: nothing is queued
    "get_gencode_flags": lambda: "-gencode compute=compute_90,code=sm_90", "has_half": True, "has_magma": True,
    "get_per_process_memory_fraction": lambda device=None: devices.memory_of(_index(device)).fraction,
    "get_sync_debug_mode": lambda: _sync_debug_mode[0], "set_sync_debug_mode": lambda mode: _set_sync_debug_mode(mode),
    "get_allocator_backend": lambda: "native", "caching_allocator_enable": lambda value=True: None,
    "caching_allocator_disabled": contextlib.nullcontext, **memory_history.TORCH_CUDA_MEMORY,
    "memory_stats_as_nested_dict": lambda device=None: _nested(memory_stats(device)),
    "list_gpu_processes": lambda device=None: f"GPU:{_index(device)}\nno processes are running",
    "utilization": _idle_percent, "memory_usage": _idle_percent,
    "device_memory_used": lambda device=None: memory_reserved(device),
    "host_memory_stats": lambda: _host_memory_stats(), "host_memory_stats_as_nested_dict": lambda: _nested(_host_memory_stats()),
    "reset_accumulated_host_memory_stats": _nothing, "reset_peak_host_memory_stats": _nothing,
}


def _accelerator(check_available: bool = False) -> torch.device:
    return torch.device("cuda")


TORCH_ACCELERATOR = {
    "is_available": is_available, "device_count": device_count, "current_accelerator": _accelerator,
    "current_device_index": current_device, "current_device_idx": current_device,
    "set_device_index": set_device, "set_device_idx": set_device, "device_index": device,
    "current_stream": current_stream, "set_stream": set_stream, "synchronize": synchronize,
    "memory_allocated": memory_allocated, "max_memory_allocated": max_memory_allocated,
    "reset_peak_memory_stats": reset_peak_memory_stats, "empty_cache": empty_cache,
    "get_device_capability": lambda device=None: {"major": CAPABILITY[0], "minor": CAPABILITY[1]},
    "get_memory_info": lambda device=None: mem_get_info(device), "memory_reserved": memory_reserved,
    "max_memory_reserved": max_memory_reserved, "memory_stats": lambda device=None: memory_stats(device),
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats, "empty_host_cache": _nothing,
}


class _DeviceMeta(type):
    """torch.device's stand-in is torch.device to isinstance and to comparisons: torch.fx writes the device
    arguments of a graph as `device(...)` and imports `device` only where `obj != torch.device` says the
    class it registered is torch.device (otherwise every traced graph with a device fails: NameError)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _TorchDevice)

    def __eq__(cls, other: object) -> bool:
        return other is cls or other is _TorchDevice

    def __hash__(cls) -> int:
        return hash(_TorchDevice)


_TorchDevice = torch.device


class device_constructor(metaclass=_DeviceMeta):
    """torch.device as CUDA builds construct it: a bare index means that CUDA device.

    Returns real torch.device objects; isinstance(x, torch.device) keeps working. It is named
    torch.device, so a pickle that refers to it (a checkpoint of a DTensor) names torch.device, as
    one written on CUDA does, and loads where simgpu is not installed.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> torch.device:  # type: ignore[misc]
        if len(args) == 1 and not kwargs and isinstance(args[0], int) and not isinstance(args[0], bool):
            return _TorchDevice("cuda", args[0])
        return _TorchDevice(*args, **kwargs)


device_constructor.__module__, device_constructor.__name__, device_constructor.__qualname__ = "torch", "device", "device"
SIMULATED_CUDA_VERSION = "12.8"  # torch.version.cuda: libraries branch on it (DDP's bf16 compression hook)
# the torch.cuda submodules that call these functions through their own imported names
CUDA_SUBMODULES = ("torch.cuda.memory", "torch.cuda.random", "torch.cuda.graphs", "torch.cuda.streams",
                   "torch.cuda.profiler", "torch.cuda.jiterator", "torch.cuda.tunable")


class _NvtxRanges:
    """torch.cuda.nvtx without NVTX (the CPU build has none): ranges nest and unwind, nothing is recorded."""

    def __init__(self) -> None:
        self.depth = 0

    def range_push(self, msg: str) -> int:
        self.depth += 1
        return self.depth - 1

    def range_pop(self) -> int:
        self.depth = max(self.depth - 1, 0)
        return self.depth

    def range_start(self, msg: str) -> int:
        return 0


GDS = {"is_available": lambda: False}  # GPUDirect Storage: no NVMe-to-GPU path here (the rest is refused)
NVTX_NAMES = ("range_push", "range_pop", "range_start", "range_end", "mark")
PROFILER_NAMES = ("start", "stop")  # cudaProfilerStart/Stop: no profiler to start, nothing is recorded
BACKENDS_CUDA = {
    "is_built": lambda: True,
    "is_flash_attention_available": lambda: True,
    # by the rules scaled_dot_product_attention dispatches with on simulated GPUs
    "can_use_flash_attention": attention.can_use_flash_attention,
    "can_use_efficient_attention": attention.can_use_efficient_attention,
    "can_use_cudnn_attention": lambda params, debug=False: False, "is_ck_sdpa_available": lambda: False,
}


def install() -> None:
    """Replace torch.cuda's and torch.accelerator's functions with the simulated ones."""
    import torch.cuda
    import torch.cuda.memory
    import torch.cuda.nvtx

    submodules = [importlib.import_module(name) for name in CUDA_SUBMODULES if importlib.util.find_spec(name)]
    for name, value in TORCH_CUDA.items():
        setattr(torch.cuda, name, value)
        for module in submodules:  # torch.cuda.random's get_rng_state calls its own `current_device`
            if hasattr(module, name):
                setattr(module, name, value)
    torch.cuda.default_generators = generators.defaults(devices.count())
    torch.version.cuda = SIMULATED_CUDA_VERSION
    ranges = _NvtxRanges()
    for name in NVTX_NAMES:
        setattr(torch.cuda.nvtx, name, getattr(ranges, name, _nothing))
    import torch.cuda.profiler

    for name in PROFILER_NAMES:
        setattr(torch.cuda.profiler, name, _nothing)
    gds = importlib.import_module("torch.cuda.gds") if importlib.util.find_spec("torch.cuda.gds") else None  # torch >= 2.7
    for name, value in GDS.items():
        if gds is not None and hasattr(gds, name):
            setattr(gds, name, value)
    import torch.backends.cuda

    for name, value in BACKENDS_CUDA.items():
        if hasattr(torch.backends.cuda, name):
            setattr(torch.backends.cuda, name, value)
    for name, legacy in legacy_types.CUDA_TYPES.items():  # torch.cuda.FloatTensor(3), isinstance(t, ...)
        setattr(torch.cuda, name, legacy)
    torch.Generator = generators.Generator  # type: ignore[misc]
    torch.cuda._initialized = True
    if hasattr(torch, "accelerator"):
        for name, value in TORCH_ACCELERATOR.items():
            if hasattr(torch.accelerator, name):
                setattr(torch.accelerator, name, value)
    torch._C._get_accelerator = _accelerator  # what torch.distributed asks when no backend is named
    torch.device = device_constructor  # type: ignore[misc]
    torch.Stream = Stream  # torch.Stream(i) is how parallel code asks for a stream on device i
    torch.Event = Event
    profiling.install()  # torch.profiler: host activity, GPU activity left out with one line
    graphs.install()

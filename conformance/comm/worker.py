"""Worker side of the single-process suite: build a case's tensors on its devices, call the API, and
describe every result as plain data (values, device, dtype, layout, which memory it shares).

Runs inside the single-process worker (conformance/single_process.py), on real GPUs or on simulated
ones: the same code either way, since the simulator makes `device="cuda:i"` mean a simulated GPU.
Nothing here is simgpu-specific.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from conformance.dtypes import to_numpy
from conformance.tensors import make

HOST = -1  # the device number of host (CPU) memory
RAW_DTYPES = ("bool", "float8_e4m3fn", "float8_e5m2")  # NCCL moves these as bytes; results come back as bytes


@dataclass
class TensorSpec:
    """A tensor a case needs: its values (carrier array), dtype, layout and device (HOST for the CPU)."""

    values: np.ndarray
    dtype: str
    layout: str = "contiguous"
    device: int = HOST

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)


@dataclass
class TensorInfo:
    """One tensor after the call, as the controller checks it."""

    values: np.ndarray  # carrier values; raw bytes (uint8) for RAW_DTYPES
    device: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # storage offset, in elements
    contiguous: bool
    storage: int  # equal numbers share memory; the case's own tensors are numbered first
    is_tensor: int | None  # index of the case tensor this is (the same Python object), if any


@dataclass
class Outcome:
    """What one call did: its results (a tree of TensorInfo), the case's tensors afterwards, or its error."""

    ok: bool
    result: Any = None
    tensors: list[TensorInfo] = field(default_factory=list)
    error_type: str = ""
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    current_device: int = 0

    def describe(self) -> str:
        return "returned" if self.ok else f"{self.error_type.rsplit('.', 1)[-1]}: {self.error.strip()[:300]}"


class Tracker:
    """Builds the case's tensors and numbers memory, so results can say which tensor they are or share."""

    def __init__(self) -> None:
        self.tensors: list[Any] = []
        self._storages: dict[tuple[int, int], int] = {}
        self._empty = 0

    def tensor(self, spec: TensorSpec) -> Any:
        """The case tensor `spec` describes, on its device, registered as case tensor number len(tensors)."""
        device = "cpu" if spec.device == HOST else f"cuda:{spec.device}"
        t = make(spec.values, spec.dtype, spec.layout, device)
        self.tensors.append(t)
        self.storage_of(t)
        return t

    def storage_of(self, t: Any) -> int:
        ptr = t.untyped_storage().data_ptr()
        if ptr == 0:  # empty storages share no memory with anything
            self._empty += 1
            return -self._empty
        key = (_device_of(t), ptr)
        return self._storages.setdefault(key, len(self._storages))

    def describe(self, t: Any) -> TensorInfo:
        import torch

        raw = str(t.dtype).removeprefix("torch.") in RAW_DTYPES
        data = t.detach()
        values = data.view(torch.uint8).cpu().numpy().copy() if raw else to_numpy(data)
        return TensorInfo(values=values, device=_device_of(t), dtype=str(t.dtype).removeprefix("torch."),
                          shape=tuple(t.shape), stride=tuple(t.stride()), offset=t.storage_offset(),
                          contiguous=t.is_contiguous(), storage=self.storage_of(t),
                          is_tensor=next((i for i, c in enumerate(self.tensors) if c is t), None))

    def describe_tree(self, result: Any) -> Any:
        import torch

        if isinstance(result, torch.Tensor):
            return self.describe(result)
        if isinstance(result, (list, tuple)):
            return type(result)(self.describe_tree(r) for r in result)
        if isinstance(result, dict):
            return {k: self.describe_tree(v) for k, v in result.items()}
        return result


def _device_of(t: Any) -> int:
    return HOST if not t.is_cuda else t.get_device()


# A runner builds the case's tensors through the tracker and returns the API call, not yet made.
Runner = Callable[[Any, Tracker], Callable[[], Any]]


def execute(runner: Runner, case: Any) -> Outcome:
    """Build the case, make the call under its current device, and describe what happened.

    Errors of the API call are the outcome; errors while building the case are the harness's and raise.
    """
    import torch

    tracker = Tracker()
    call = runner(case, tracker)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.cuda.device(case.current):
                result = call()
            _synchronize()
        except Exception as exc:  # noqa: BLE001 - the API's error is what the case observes
            _synchronize()
            return Outcome(False, error_type=_qualname(type(exc)), error=str(exc),
                           warnings=_warning_lines(caught), current_device=torch.cuda.current_device())
    return Outcome(True, result=tracker.describe_tree(result), tensors=[tracker.describe(t) for t in tracker.tensors],
                   warnings=_warning_lines(caught), current_device=torch.cuda.current_device())


def run_cases(runner: Runner, cases: list[Any]) -> list[Outcome]:
    """The worker's entry for one example: every case of it, in order."""
    return [execute(runner, case) for case in cases]


def _synchronize() -> None:
    """Streams other than the current one may still be writing (scatter's streams=, nccl's streams=)."""
    import torch

    for index in range(torch.cuda.device_count()):
        torch.cuda.synchronize(index)


def _warning_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    return [f"{w.category.__name__}: {w.message}" for w in caught]


def _qualname(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"


def device_arg(form: Any) -> Any:
    """A device argument as the case spelled it: ("int", i), ("str", "cuda:1"), ("device", "cuda:1") or a literal."""
    import torch

    if isinstance(form, tuple) and len(form) == 2 and form[0] in ("int", "str", "device"):
        kind, value = form
        return value if kind in ("int", "str") else torch.device(value)
    return form


def streams_for(devices: list[int | None] | None) -> list[Any] | None:
    """New streams on these devices (None entries stay None), each ordered after its device's current
    stream, so work queued on it sees the case's tensors fully written."""
    import torch

    if devices is None:
        return None
    streams = []
    for d in devices:
        if d is None:
            streams.append(None)
            continue
        s = torch.cuda.Stream(device=d)
        s.wait_stream(torch.cuda.current_stream(d))
        streams.append(s)
    return streams

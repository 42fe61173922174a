"""The C++ primitives under torch.cuda.comm and torch.cuda.nccl, on simulated GPUs.

torch's own Python wrappers (torch/nn/parallel/comm.py, torch/cuda/nccl.py) stay in charge of
argument handling, defaults (the current device), complex views and their warnings, version by
version; the simulator replaces only what they call in torch._C, following
torch/csrc/cuda/comm.cpp and nccl.cpp: the same results, aliasing, checks and messages.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from simgpu.cuda_sim import devices
from simgpu.cuda_sim.tensors import suspended

Tensor = torch.Tensor
NCCL_VERSION = (2, 28, 9)


def _sizes(t: Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _dev(t: Tensor) -> str:
    index = devices.device_of(t)
    return "cpu" if index is None else f"cuda:{index}"


def _on(t: Tensor) -> int:
    """get_device() as C++ sees it: -1 for host tensors."""
    index = devices.device_of(t)
    return -1 if index is None else index


def _copy_to(t: Tensor, index: int | None) -> Tensor:
    """A fresh tensor like `t` (memory format preserved) on `index`, holding t's values."""
    out = torch.empty_like(t, memory_format=torch.preserve_format)
    out.copy_(t)
    if index is not None:
        devices.place(out, devices.check_index(index))
    return out


def _wrap_dim(dim: int, ndim: int) -> int:
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


# ---- torch.cuda.comm ----
def broadcast(tensor: Tensor, device_ids: Sequence[int]) -> list[Tensor]:
    with suspended():
        for d in device_ids:
            if d < 0:
                raise RuntimeError(f"Expected non-negative device index, but got {d}")
        return [tensor if d == _on(tensor) else _copy_to(tensor, d) for d in device_ids]


def broadcast_out(tensor: Tensor, out: Sequence[Tensor]) -> list[Tensor]:
    with suspended():
        for i, o in enumerate(out):
            if devices.device_of(o) is None:
                raise RuntimeError(f"Expected all output tensors to be CUDA tensors, but output tensor at index {i} "
                                   f"has device '{_dev(o)}'")
            if o.shape != tensor.shape:
                raise RuntimeError(f"Expected all output tensors to have same shape as the source tensor "
                                   f"{_sizes(tensor)}, but output tensor at index {i} has shape {_sizes(o)}")
        for o in out:
            o.copy_(tensor)
        return list(out)


def broadcast_coalesced(tensors: Sequence[Tensor], device_ids: Sequence[int], buffer_size: int) -> list[list[Tensor]]:
    with suspended():
        if not device_ids:
            raise RuntimeError("Expected at least one device")
        first = device_ids[0]
        if any(_on(t) != first for t in tensors):
            raise RuntimeError(f"All tensors must be on devices[0]: {first}")
        return [list(tensors)] + [[_copy_to(t, d) for t in tensors] for d in device_ids[1:]]


def _check_stream(streams: Sequence[Any] | None, i: int, index: int) -> None:
    if streams is not None and i < len(streams) and streams[i] is not None:
        got = streams[i].device_index
        if got != index:
            raise RuntimeError(f"Expected the device associated with the stream at index {i} (was {got}) "
                               f"to match the device supplied at that index (expected {index})")


def scatter(tensor: Tensor, device_ids: Sequence[int], chunk_sizes: Sequence[int] | None, dim: int,
            streams: Sequence[Any] | None) -> list[Tensor]:
    with suspended():
        if not device_ids:
            raise RuntimeError("Expected at least one device to scatter to")
        if chunk_sizes is not None and len(chunk_sizes) != len(device_ids):
            raise RuntimeError(f"Expected devices and chunk_sizes to be of same length, but got len(chunk_sizes) = "
                               f"{len(chunk_sizes)} and len(devices) = {len(device_ids)}")
        dim = _wrap_dim(dim, tensor.dim())
        chunks = list(tensor.split_with_sizes(list(chunk_sizes), dim) if chunk_sizes is not None
                      else tensor.chunk(len(device_ids), dim))
        for i, chunk in enumerate(chunks):
            index = device_ids[i]
            if index != _on(tensor):
                _check_stream(streams, i, index)
                chunks[i] = _copy_to(chunk, index)
        return chunks


def scatter_out(tensor: Tensor, out: Sequence[Tensor], dim: int, streams: Sequence[Any] | None) -> list[Tensor]:
    with suspended():
        if not out:
            raise RuntimeError("Expected at least one output tensor to scatter to")
        dim = _wrap_dim(dim, tensor.dim())
        total, sizes = 0, []
        for i, o in enumerate(out):
            if devices.device_of(o) is None:
                raise RuntimeError(f"Expected all output tensors to be CUDA tensors, but output tensor at index {i} "
                                   f"has device '{_dev(o)}'")
            shape = list(o.shape)
            same_ndim = len(shape) == tensor.dim()
            if same_ndim:
                total += shape[dim]
                sizes.append(shape[dim])
                shape[dim] = tensor.shape[dim]
            if not same_ndim or shape != list(tensor.shape):
                raise RuntimeError(f"Output tensor at index {i} has incorrect shape: {_sizes(o)}. Expected same shape "
                                   f"except for scatter dim {dim} as the source tensor: {_sizes(tensor)}")
        if total != tensor.shape[dim]:
            raise RuntimeError(f"Total size for output tensors along scatter dim {dim} does not match the source "
                               f"tensor size at dim {dim}. Expected {tensor.shape[dim]}, but got total size {total}")
        for i, (o, chunk) in enumerate(zip(out, tensor.split_with_sizes(sizes, dim))):
            _check_stream(streams, i, _on(o))
            o.copy_(chunk)
        return list(out)


def _gather_shape(tensors: Sequence[Tensor], dim: int) -> tuple[list[int], int]:
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    first = tensors[0]
    dim = _wrap_dim(dim, first.dim())
    expected = list(first.shape)
    total = 0
    for i, t in enumerate(tensors):
        if devices.device_of(t) is None:
            raise RuntimeError(f"Expected all input tensors to be CUDA tensors, but tensor at index {i} has device {_dev(t)}")
        if t.dim() != len(expected):
            raise RuntimeError(f"Expected all input tensors to have the same number of dimensions ({len(expected)}), "
                               f"but tensor at index {i}has {t.dim()} dimensions, ({_sizes(t)})")
        expected[dim] = t.shape[dim]
        if list(t.shape) != expected:
            raise RuntimeError(f"Input tensor at index {i} has invalid shape {_sizes(t)}, but expected "
                               f"[{', '.join(map(str, expected))}]")
        total += t.shape[dim]
    expected[dim] = total
    return expected, dim


def _gather_into(tensors: Sequence[Tensor], out: Tensor, dim: int) -> Tensor:
    for chunk, t in zip(out.split([t.shape[dim] for t in tensors], dim), tensors):
        chunk.copy_(t)
    return out


def _memory_format(tensors: Sequence[Tensor]) -> torch.memory_format:
    formats = {torch.channels_last if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)
               and not t.is_contiguous() else torch.contiguous_format for t in tensors}
    return formats.pop() if len(formats) == 1 else torch.contiguous_format


def gather(tensors: Sequence[Tensor], dim: int, destination: int | None) -> Tensor:
    with suspended():
        shape, dim = _gather_shape(tensors, dim)
        out = torch.empty(shape, dtype=tensors[0].dtype).contiguous(memory_format=_memory_format(tensors))
        if destination != -1:
            devices.place(out, devices.current() if destination is None else devices.check_index(destination))
        return _gather_into(tensors, out, dim)


def gather_out(tensors: Sequence[Tensor], out: Tensor, dim: int) -> Tensor:
    with suspended():
        shape, dim = _gather_shape(tensors, dim)
        if list(out.shape) != shape:
            raise RuntimeError(f"Expected out tensor to have shape [{', '.join(map(str, shape))}], but got {_sizes(out)}")
        return _gather_into(tensors, out, dim)


# ---- torch.cuda.nccl ----
NCCL_TYPES = {torch.float32, torch.float16, torch.float64, torch.int64, torch.int32, torch.int8, torch.uint8,
              torch.bfloat16, torch.bool, torch.float8_e5m2, torch.float8_e4m3fn}
RAW_BYTES = {torch.bool, torch.float8_e5m2, torch.float8_e4m3fn}  # NCCL moves these as ncclUint8
SUM, PROD, MAX, MIN, AVG = range(5)


def _check_one(t: Tensor, dtype: torch.dtype) -> None:
    if devices.device_of(t) is None or t.is_sparse:
        raise RuntimeError("input and output elements have to be cuda dense Tensors")
    if t.dtype != dtype:
        raise RuntimeError("all inputs and outputs must be of the same Tensor dtype")
    if not t.is_contiguous():
        raise RuntimeError("all inputs and outputs have to be contiguous")


def _check_inputs(inputs: Sequence[Tensor], outputs: Sequence[Tensor | None], in_mult: int, out_mult: int) -> None:
    if len(inputs) == 0:
        raise RuntimeError("input sequence can't be empty")
    if len(inputs) != len(outputs):
        raise RuntimeError(f"inputs and outputs sequences have to be of the same length, but got input of length "
                           f"{len(inputs)} and output of length {len(outputs)}")
    numel, dtype = inputs[0].numel(), inputs[0].dtype
    seen: set[int] = set()
    for inp, out in zip(inputs, outputs):
        _check_one(inp, dtype)
        if inp.numel() != numel:
            raise RuntimeError("all inputs must have the same number of elements")
        if out is not None:
            _check_one(out, dtype)
            if _on(inp) != _on(out):
                raise RuntimeError("input and output must be on the same device")
            if out.numel() * out_mult != numel * in_mult:
                raise RuntimeError("output must be of size input_size * size_multiplier")
        if _on(inp) in seen:
            raise RuntimeError("inputs must be on unique devices")
        seen.add(_on(inp))
    if dtype not in NCCL_TYPES:
        raise TypeError(f"Unconvertible NCCL type {str(dtype).removeprefix('torch.').capitalize()}")


def _reduce(tensors: Sequence[Tensor], op: int) -> Tensor:
    """NCCL's reduction of equally sized tensors, flattened; raw-byte dtypes reduce as uint8."""
    if op not in (SUM, PROD, MAX, MIN, AVG):
        raise RuntimeError(f"simgpu: unknown raw NCCL reduction op {op} (0 SUM, 1 PROD, 2 MAX, 3 MIN, 4 AVG)")
    dtype = tensors[0].dtype
    flat = [t.reshape(-1).view(torch.uint8) if dtype in RAW_BYTES else t.reshape(-1) for t in tensors]
    n = len(flat)
    if op == AVG and flat[0].is_floating_point():
        scale = torch.tensor(1.0 / n, dtype=torch.float64).to(flat[0].dtype)
        flat = [x * scale for x in flat]
    acc = flat[0].clone()
    for x in flat[1:]:
        if op in (SUM, AVG):
            acc += x
        elif op == PROD:
            acc *= x
        elif op == MAX:
            acc = torch.fmax(acc, x) if acc.is_floating_point() else torch.maximum(acc, x)
        else:
            acc = torch.fmin(acc, x) if acc.is_floating_point() else torch.minimum(acc, x)
    if op == AVG and not acc.is_floating_point():
        acc = torch.div(acc, n, rounding_mode="trunc").to(acc.dtype)
    return acc.view(dtype) if dtype in RAW_BYTES else acc


def _write(out: Tensor, flat: Tensor) -> None:
    out.view(-1).copy_(flat.view(out.dtype) if flat.dtype != out.dtype else flat)


def nccl_all_reduce(inputs: Sequence[Tensor], outputs: Sequence[Tensor], op: int, streams: Any, comms: Any) -> None:
    with suspended():
        _check_inputs(inputs, outputs, 1, 1)
        result = _reduce(inputs, op)
        for out in outputs:
            _write(out, result)


def nccl_reduce(inputs: Sequence[Tensor], output: Tensor, root: int, op: int, streams: Any, comms: Any) -> None:
    with suspended():
        if not 0 <= root < len(inputs):
            raise IndexError(f"simgpu: root {root} out of range for {len(inputs)} inputs")
        _check_inputs(inputs, [output if i == root else None for i in range(len(inputs))], 1, 1)
        _write(output, _reduce(inputs, op))


def nccl_broadcast(inputs: Sequence[Tensor], root: int, streams: Any, comms: Any) -> None:
    with suspended():
        _check_inputs(inputs, inputs, 1, 1)
        if not 0 <= root < len(inputs):
            raise IndexError(f"simgpu: root {root} out of range for {len(inputs)} inputs")
        source = inputs[root].clone()
        for i, t in enumerate(inputs):
            if i != root:
                t.copy_(source)


def nccl_all_gather(inputs: Sequence[Tensor], outputs: Sequence[Tensor], streams: Any, comms: Any) -> None:
    with suspended():
        _check_inputs(inputs, outputs, len(inputs), 1)
        gathered = torch.cat([t.reshape(-1) for t in inputs])
        for out in outputs:
            _write(out, gathered)


def nccl_reduce_scatter(inputs: Sequence[Tensor], outputs: Sequence[Tensor], op: int, streams: Any,
                        comms: Any) -> None:
    with suspended():
        _check_inputs(inputs, outputs, 1, len(inputs))
        chunks = _reduce(inputs, op).chunk(len(inputs))
        for out, chunk in zip(outputs, chunks):
            _write(out, chunk)


def nccl_version() -> int:
    major, minor, patch = NCCL_VERSION
    return (major << 32) | (minor << 16) | patch


TORCH_C = {
    "_broadcast": broadcast, "_broadcast_out": broadcast_out, "_broadcast_coalesced": broadcast_coalesced,
    "_scatter": scatter, "_scatter_out": scatter_out, "_gather": gather, "_gather_out": gather_out,
    "_nccl_all_reduce": nccl_all_reduce, "_nccl_reduce": nccl_reduce, "_nccl_broadcast": nccl_broadcast,
    "_nccl_all_gather": nccl_all_gather, "_nccl_reduce_scatter": nccl_reduce_scatter,
    "_nccl_version": nccl_version, "_nccl_version_suffix": lambda: b"",
}


def install() -> None:
    """Give torch._C the primitives torch.cuda.comm and torch.cuda.nccl call."""
    for name, fn in TORCH_C.items():
        setattr(torch._C, name, fn)

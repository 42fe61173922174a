"""The C++ primitives under torch.cuda.comm and torch.cuda.nccl, on simulated GPUs.

torch's own Python wrappers (torch/nn/parallel/comm.py, torch/cuda/nccl.py) stay in charge of
argument handling, defaults (the current device), complex views and their warnings, version by
version; the simulator replaces only what they call in torch._C, following
torch/csrc/cuda/comm.cpp and nccl.cpp: the same results, aliasing, checks and messages.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from simgpu.cuda_sim import devices, placement
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


def _copy_to(t: Tensor, index: int | None, memory_format: torch.memory_format = torch.preserve_format) -> Tensor:
    """A fresh tensor like `t` on `index`, holding t's values: `.to(device)` keeps t's layout where it is dense
    (preserve_format), comm.cpp's `at::empty(sizes, options)` is contiguous."""
    out = torch.empty_like(t, memory_format=memory_format)
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
        for d in device_ids:  # comm.cpp allocates as it checks: the first bad device decides the error
            if d < 0:
                raise RuntimeError(f"Expected non-negative device index, but got {d}")
            if d != _on(tensor):
                devices.check_index(d)
        return [tensor if d == _on(tensor) else _copy_to(tensor, d, torch.contiguous_format) for d in device_ids]


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


def take_tensors(tensors: Sequence[Tensor], size_limit: int) -> list[list[Tensor]]:
    """torch/csrc/utils/tensor_flatten.cpp take_tensors (not fine-grained): tensors grouped by type, a group
    closed as soon as its bytes reach size_limit; what is left, by type, at the end."""
    chunks: list[list[Tensor]] = []
    open_groups: dict[torch.dtype, tuple[list[Tensor], list[int]]] = {}
    for t in tensors:
        group, size = open_groups.setdefault(t.dtype, ([], [0]))
        group.append(t)
        size[0] += t.numel() * t.element_size()
        if size[0] >= size_limit:
            chunks.append(group)
            del open_groups[t.dtype]
    return chunks + [group for group, _ in open_groups.values()]


def _reorder_like(outputs: list[Tensor], order: Sequence[Tensor]) -> list[Tensor]:
    """utils::reorder_tensors_like: put chunk-ordered results back in the order of the inputs, type by type."""
    by_type: dict[torch.dtype, list[Tensor]] = {}
    for t in outputs:
        by_type.setdefault(t.dtype, []).append(t)
    return [by_type[t.dtype].pop(0) for t in order]


def broadcast_coalesced(tensors: Sequence[Tensor], device_ids: Sequence[int], buffer_size: int) -> list[list[Tensor]]:
    """comm.cpp: each chunk is flattened on devices[0], broadcast, and unflattened into views of one buffer per
    device (detached, as `make_variable(tensor_data())`); devices[0]'s entry is the input list itself."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    with suspended():
        if not device_ids:
            raise RuntimeError("simgpu: broadcast_coalesced with no devices (comm.cpp reads devices[0] unchecked)")
        first = device_ids[0]
        if any(_on(t) != first for t in tensors):
            raise RuntimeError(f"All tensors must be on devices[0]: {first}")
        outputs: list[list[Tensor]] = [list(tensors)] + [[] for _ in device_ids[1:]]
        chunks = take_tensors(tensors, buffer_size)
        for chunk in chunks:
            flat = _flatten_dense_tensors(chunk)
            if devices.device_of(flat) is None:
                devices.place(flat, first)
            copies = broadcast(flat, device_ids)
            for i in range(1, len(device_ids)):
                for t in _unflatten_dense_tensors(copies[i], chunk):
                    if devices.device_of(t) is None:  # empty tensors get storages of their own
                        devices.place(t, device_ids[i])
                    outputs[i].append(t.data)
        if len({t.dtype for t in tensors}) > 1:
            outputs = [_reorder_like(o, tensors) for o in outputs]
        return outputs


def _check_stream(streams: Sequence[Any] | None, i: int, index: int) -> None:
    """comm.cpp streams the stream's DeviceIndex, an int8_t, as a character: device 2 prints as "\x02", and
    device 0's NUL ends the message there (seen on torch 2.11: "... at index 0 (was")."""
    if streams is not None and i < len(streams) and streams[i] is not None:
        got = streams[i].device_index
        if got != index:
            message = (f"Expected the device associated with the stream at index {i} (was {chr(got % 256)}) "
                       f"to match the device supplied at that index (expected {index})")
            raise RuntimeError(message.split("\0", 1)[0])


def scatter(tensor: Tensor, device_ids: Sequence[int], chunk_sizes: Sequence[int] | None, dim: int,
            streams: Sequence[Any] | None) -> list[Tensor]:
    with suspended():
        if not device_ids:
            raise RuntimeError("Expected at least one device to scatter to")
        if chunk_sizes is not None and len(chunk_sizes) != len(device_ids):
            raise RuntimeError(f"Expected devices and chunk_sizes to be of same length, but got len(devices) = "
                               f"{len(device_ids)} and len(chunk_sizes) = {len(chunk_sizes)}")
        dim = _wrap_dim(dim, tensor.dim())
        chunks = list(tensor.split_with_sizes(list(chunk_sizes), dim) if chunk_sizes is not None
                      else tensor.chunk(len(device_ids), dim))
        for i, chunk in enumerate(chunks):
            index = device_ids[i]
            if index != _on(tensor):
                _check_stream(streams, i, index)
                if index < 0:
                    raise RuntimeError(f"Expected non-negative device index, but got {index}")
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


def _gather_shape(tensors: Sequence[Tensor], dim: int, quoted: bool) -> tuple[list[int], int]:
    """The checks gather and gather_out share (comm.cpp); only gather_out quotes the device in its message."""
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    first = tensors[0]
    dim = _wrap_dim(dim, first.dim())
    expected = list(first.shape)
    total = 0
    for i, t in enumerate(tensors):
        if devices.device_of(t) is None:
            where = f"'{_dev(t)}'" if quoted else _dev(t)
            raise RuntimeError(f"Expected all input tensors to be CUDA tensors, but tensor at index {i} has device "
                               f"{where}")
        if t.dim() != len(expected):
            raise RuntimeError(f"Expected all input tensors to have the same number of dimensions, but tensor at index "
                               f"{i}has {t.dim()} dimensions, (expected {len(expected)})")
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
    """gather's result layout: the first tensor's suggested memory format, if every input suggests the same."""
    from torch._prims_common import suggest_memory_format

    formats = {suggest_memory_format(t) for t in tensors}
    return formats.pop() if len(formats) == 1 else torch.contiguous_format


def gather(tensors: Sequence[Tensor], dim: int, destination: int | None) -> Tensor:
    with suspended():
        shape, dim = _gather_shape(tensors, dim, quoted=False)
        out = torch.empty(shape, dtype=tensors[0].dtype, memory_format=_memory_format(tensors),
                          device=placement.backing(tensors[0]) if destination != -1 else "cpu")  # storage-less in a plan
        if destination != -1:
            devices.place(out, devices.current() if destination is None else devices.check_index(destination))
        return _gather_into(tensors, out, dim)


def gather_out(tensors: Sequence[Tensor], out: Tensor, dim: int) -> Tensor:
    with suspended():
        shape, dim = _gather_shape(tensors, dim, quoted=True)
        if list(out.shape) != shape:
            raise RuntimeError(f"Expected out tensor to have shape [{', '.join(map(str, shape))}], but got {_sizes(out)}")
        return _gather_into(tensors, out, dim)


# ---- torch.cuda.nccl ----
NCCL_TYPES = {torch.float32, torch.float16, torch.float64, torch.int64, torch.int32, torch.int8, torch.uint8,
              torch.bfloat16, torch.bool, torch.float8_e5m2, torch.float8_e4m3fn}
RAW_BYTES = {torch.bool, torch.float8_e5m2, torch.float8_e4m3fn}  # NCCL moves these as ncclUint8
for _name in ("float8_e4m3fnuz", "float8_e5m2fnuz"):  # nccl.cpp maps these to ncclUint8 too
    if hasattr(torch, _name):
        NCCL_TYPES.add(getattr(torch, _name))
        RAW_BYTES.add(getattr(torch, _name))
SUM, PROD, MAX, MIN, AVG = range(5)
# c10::ScalarType names, as "Unconvertible NCCL type <name>" prints them
SCALAR_TYPE_NAMES = {"int16": "Short", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
                     "complex32": "ComplexHalf", "complex64": "ComplexFloat", "complex128": "ComplexDouble",
                     "qint8": "QInt8", "quint8": "QUInt8", "qint32": "QInt32"}


def _scalar_type_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    return SCALAR_TYPE_NAMES.get(name, name[:1].upper() + name[1:])


def _extract_tensors(seq: Sequence[Any]) -> list[Tensor]:
    """python_nccl.cpp extract_tensors: every element must be a tensor (TypeError otherwise)."""
    tensors = list(seq)
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected Tensor at {i} (got {type(t).__name__})")
    return tensors


def _check_streams(streams: Sequence[Any] | None, count: int) -> None:
    """python_nccl.cpp unpack_streams: None, or one stream (or None) per input."""
    if streams is not None and len(list(streams)) != count:
        raise RuntimeError("number of streams is not equal to number of inputs")


def _check_one(t: Tensor, dtype: torch.dtype) -> None:
    if devices.device_of(t) is None or t.is_sparse:
        raise RuntimeError("input and output elements have to be cuda dense Tensors")
    if t.dtype != dtype:
        raise RuntimeError("all inputs and outputs must be of the same Tensor dtype")
    if not t.is_contiguous():
        raise RuntimeError("all inputs and outputs have to be contiguous")


def _check_inputs(inputs: Sequence[Tensor], outputs: Sequence[Tensor | None], in_mult: int, out_mult: int) -> None:
    """nccl.cpp check_inputs, then to_nccl_data_type (the dtype is checked last, as there)."""
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
        raise RuntimeError(f"Unconvertible NCCL type {_scalar_type_name(dtype)}")


def _reduce(tensors: Sequence[Tensor], op: int) -> Tensor:
    """NCCL's reduction of equally sized tensors, flattened; raw-byte dtypes reduce as uint8."""
    if op not in (SUM, PROD, MAX, MIN, AVG):
        raise RuntimeError("NCCL Error 4: invalid argument (run with NCCL_DEBUG=WARN for details) "
                           f"(simgpu: raw NCCL reduction op {op}; 0 SUM, 1 PROD, 2 MAX, 3 MIN, 4 AVG)")
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
    """Store a result as NCCL does, byte for byte: raw-byte dtypes keep the uint8 result (a bool may hold 3)."""
    if out.dtype in RAW_BYTES:
        out.view(-1).view(torch.uint8).copy_(flat.view(torch.uint8))
    else:
        out.view(-1).copy_(flat)


def nccl_all_reduce(inputs: Sequence[Tensor], outputs: Sequence[Tensor], op: int, streams: Any, comms: Any) -> None:
    with suspended():
        inputs, outputs = _extract_tensors(inputs), _extract_tensors(outputs)
        _check_streams(streams, len(inputs))
        _check_inputs(inputs, outputs, 1, 1)
        result = _reduce(inputs, op)
        for out in outputs:
            _write(out, result)


def nccl_reduce(inputs: Sequence[Tensor], output: Tensor, root: int, op: int, streams: Any, comms: Any) -> None:
    with suspended():
        inputs = _extract_tensors(inputs)
        if not isinstance(output, torch.Tensor):
            raise TypeError(f"expected Tensor (got {type(output).__name__})")
        _check_streams(streams, len(inputs))
        if not 0 <= root < len(inputs):
            raise RuntimeError("invalid root")
        _check_inputs(inputs, [output if i == root else None for i in range(len(inputs))], 1, 1)
        _write(output, _reduce(inputs, op))


def nccl_broadcast(inputs: Sequence[Tensor], root: int, streams: Any, comms: Any) -> None:
    """python_nccl.cpp checks `root` and then drops it: nccl.cpp's broadcast calls ncclBcast with root 0, so
    every tensor receives inputs[0] whatever root says (pytorch/pytorch#179908, torch 2.9 to 2.13 at least)."""
    with suspended():
        inputs = _extract_tensors(inputs)
        if not 0 <= root < len(inputs):
            raise RuntimeError("invalid root")
        _check_streams(streams, len(inputs))
        _check_inputs(inputs, inputs, 1, 1)
        source = inputs[0].reshape(-1).clone()
        for t in inputs[1:]:
            _write(t, source)


def nccl_all_gather(inputs: Sequence[Tensor], outputs: Sequence[Tensor], streams: Any, comms: Any) -> None:
    with suspended():
        inputs, outputs = _extract_tensors(inputs), _extract_tensors(outputs)
        _check_streams(streams, len(inputs))
        _check_inputs(inputs, outputs, len(inputs), 1)
        raw = inputs[0].dtype in RAW_BYTES
        gathered = torch.cat([t.reshape(-1).view(torch.uint8) if raw else t.reshape(-1) for t in inputs])
        for out in outputs:
            _write(out, gathered)


def nccl_reduce_scatter(inputs: Sequence[Tensor], outputs: Sequence[Tensor], op: int, streams: Any,
                        comms: Any) -> None:
    with suspended():
        inputs, outputs = _extract_tensors(inputs), _extract_tensors(outputs)
        _check_streams(streams, len(inputs))
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

"""The simulated torch.cuda.comm / torch.cuda.nccl primitives (simgpu/cuda_sim/comm.py) against
hand-computed cases: aliasing, the default destination under `torch.cuda.device(1)`, fewer chunks than
devices, raw-byte NCCL reductions, errors and their messages. Plus the single-process worker that runs
them (conformance/single_process.py): a hung or crashed worker is replaced.

simgpu.cuda_sim.activate() patches torch process-wide, so every check runs in the single-process worker
(4 simulated GPUs), never in this pytest process. The `in_sim_*` functions are what the worker runs;
they assert and the test reports their failure.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterator

import pytest

from conformance.single_process import DeviceSetup, SingleProcessWorker
from tests.processes import all_gone


@pytest.fixture(scope="module")
def sim() -> Iterator[SingleProcessWorker]:
    worker = SingleProcessWorker(DeviceSetup("sim", 4), timeout=60.0)
    yield worker
    worker.close()


def run_in_sim(worker: SingleProcessWorker, fn: Any, *args: Any) -> Any:
    reply = worker.call(fn, *args)
    assert reply.ok, reply.error or reply.broken
    return reply.value


def raises(exc_type: type, match: str, fn: Any, *args: Any, **kwargs: Any) -> str:
    """The message of the exception fn raises, checked against type and pattern (pytest.raises, for the worker)."""
    import re

    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - checked just below
        assert type(exc) is exc_type, f"{type(exc).__name__}: {exc} (expected {exc_type.__name__})"
        assert re.search(match, str(exc)), f"{exc!s} does not match /{match}/"
        return str(exc)
    raise AssertionError(f"no {exc_type.__name__} matching /{match}/")


def same_memory(a: Any, b: Any) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ----------------------------------------------------------------------------- torch.cuda.comm
def in_sim_broadcast_aliases_the_source() -> None:
    import torch
    import torch.cuda.comm as comm

    x = torch.arange(6.0).reshape(2, 3).cuda(1)
    out = comm.broadcast(x, [1, 0, 1, 2])
    assert out[0] is x and out[2] is x, "the source device's entries are the input itself"
    assert [o.get_device() for o in out] == [1, 0, 1, 2]
    assert not same_memory(out[1], x) and not same_memory(out[1], out[3])
    assert torch.equal(out[1].cpu(), x.cpu()) and torch.equal(out[3].cpu(), x.cpu())
    host = torch.arange(6.0).reshape(3, 2).t()  # a transposed host tensor: every entry is a contiguous copy
    copies = comm.broadcast(host, [0, 0])
    assert all(c.is_contiguous() and c.get_device() == 0 and torch.equal(c.cpu(), host) for c in copies)
    assert not same_memory(copies[0], copies[1]), "repeats of a device get copies of their own"


def in_sim_broadcast_errors() -> None:
    import torch
    import torch.cuda.comm as comm

    x = torch.ones(2, device="cuda:0")
    raises(RuntimeError, r"^Expected non-negative device index, but got -1$", comm.broadcast, x, [0, -1])
    raises(RuntimeError, r"Exactly one of 'devices' and 'out' must be specified", comm.broadcast, x)
    raises(RuntimeError, r"^Expected all output tensors to be CUDA tensors, but output tensor at index 1 has "
                         r"device 'cpu'$", comm.broadcast, x, out=[torch.zeros(2, device="cuda:1"), torch.zeros(2)])
    raises(RuntimeError, r"^Expected all output tensors to have same shape as the source tensor \[2\], but output "
                         r"tensor at index 0 has shape \[3\]$", comm.broadcast, x,
           out=[torch.zeros(3, device="cuda:1")])
    raises(ValueError, r"Expected a non cpu device", comm.broadcast, x, ["cpu"])
    raises(getattr(torch, "AcceleratorError", RuntimeError), r"^CUDA error: invalid device ordinal", comm.broadcast, x,
           [0, 4])


def in_sim_broadcast_coalesced_buffers() -> None:
    import torch
    import torch.cuda.comm as comm

    a, b = torch.arange(4.0, device="cuda:2"), torch.arange(3, device="cuda:2")
    c, empty = torch.ones(2, 2, device="cuda:2"), torch.empty(0, 3, device="cuda:2")
    rows = comm.broadcast_coalesced([a, b, c, empty], [2, 0, 3])
    assert rows[0][0] is a and rows[0][1] is b and rows[0][2] is c, "devices[0]'s entry is the input list"
    for row, device in zip(rows[1:], [0, 3]):
        assert [t.get_device() for t in row] == [device] * 4 and [t.dtype for t in row] == [a.dtype, b.dtype,
                                                                                            c.dtype, empty.dtype]
        assert row[3].shape == (0, 3) and torch.equal(row[1].cpu(), b.cpu())
        assert same_memory(row[0], row[2]), "a and c (float32, 32 bytes) travel in one buffer"
        assert not same_memory(row[0], row[1]), "int64 goes in a buffer of its own type"
    small = comm.broadcast_coalesced([a, c], [2, 1], buffer_size=8)  # 16 bytes each: a buffer apiece
    assert not same_memory(small[1][0], small[1][1]) and torch.equal(small[1][1].cpu(), c.cpu())
    raises(RuntimeError, r"^All tensors must be on devices\[0\]: 1$", comm.broadcast_coalesced, [a], [1, 2])
    raises(RuntimeError, r"^All tensors must be on devices\[0\]: 0$", comm.broadcast_coalesced, [a.cpu()], [0])


def in_sim_scatter_chunks_and_views() -> None:
    import torch
    import torch.cuda.comm as comm

    three_rows = torch.arange(6.0).reshape(3, 2).cuda(2)
    parts = comm.scatter(three_rows, [0, 1, 2, 3])
    assert len(parts) == 3, "3 rows on 4 devices: chunks of ceil(3/4) = 1 row, so 3 chunks"
    assert [p.get_device() for p in parts] == [0, 1, 2]
    assert same_memory(parts[2], three_rows) and parts[2].data_ptr() == three_rows[2].data_ptr(), "a view"
    assert not same_memory(parts[0], three_rows)
    assert len(comm.scatter(torch.ones(1, 5), [0, 1])) == 1, "1 row on 2 devices: 1 chunk"
    cols = comm.scatter(torch.arange(12).reshape(3, 4), [1, 0], chunk_sizes=[3, 1], dim=-1)
    assert [tuple(c.shape) for c in cols] == [(3, 3), (3, 1)] and cols[1].tolist() == [[3], [7], [11]]
    source = torch.ones(2, 2, device="cuda:1")
    whole, empty = comm.scatter(source, [1, 3], chunk_sizes=[2, 0])
    assert whole.data_ptr() == source.data_ptr() and empty.shape == (0, 2) and empty.get_device() == 3


def in_sim_scatter_errors() -> None:
    import torch
    import torch.cuda.comm as comm

    x = torch.arange(4.0, device="cuda:0")
    raises(RuntimeError, r"^Expected at least one device to scatter to$", comm.scatter, x, [])
    raises(RuntimeError, r"^Expected devices and chunk_sizes to be of same length, but got len\(devices\) = 2 and "
                         r"len\(chunk_sizes\) = 1$", comm.scatter, x, [0, 1], chunk_sizes=[4])
    raises(RuntimeError, r"split_with_sizes expects split_sizes to sum exactly to 4", comm.scatter, x, [0, 1],
           chunk_sizes=[1, 1])
    raises(RuntimeError, r"^Expected non-negative device index, but got -1$", comm.scatter, x, [0, -1])
    raises(RuntimeError, r"^Expected the device associated with the stream at index 1 \(was \x02\) to match the "
                         r"device supplied at that index \(expected 1\)$", comm.scatter, x, [0, 1],
           streams=[None, torch.cuda.Stream(device=2)])  # the int8_t device index printed as a character
    raises(RuntimeError, r"^Expected the device associated with the stream at index 0 \(was $", comm.scatter, x,
           [1], chunk_sizes=[4], streams=[torch.cuda.Stream(device=0)])  # device 0's NUL ends the message
    raises(AttributeError, r"'tuple' object has no attribute", comm.scatter, (x, x), [0, 1])
    raises(RuntimeError, r"Total size for output tensors along scatter dim 0 does not match", comm.scatter, x,
           out=[torch.zeros(3, device="cuda:1")])


def in_sim_gather_default_destination_is_the_current_device() -> None:
    import warnings

    import torch
    import torch.cuda.comm as comm

    parts = [torch.ones(1, 2, device="cuda:0"), torch.zeros(2, 2, dtype=torch.float64, device="cuda:3")]
    with torch.cuda.device(1):
        here = comm.gather(parts)
        total = comm.reduce_add([torch.ones(2, device="cuda:1"), torch.ones(2, device="cuda:2")])
    assert here.get_device() == 1 and here.dtype == torch.float32, "the current device, the first tensor's dtype"
    assert here.shape == (3, 2) and here.sum().item() == 2.0
    assert total.get_device() == 1 and total.tolist() == [2.0, 2.0]
    assert comm.gather(parts, destination="cpu").device.type == "cpu"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert comm.gather(parts, destination=-1).device.type == "cpu"
    assert any(issubclass(w.category, FutureWarning) for w in caught)
    raises(RuntimeError, r"^Expected all input tensors to have the same number of dimensions, but tensor at index "
                         r"1has 1 dimensions, \(expected 2\)$", comm.gather, [parts[0], torch.ones(2, device="cuda:0")])
    raises(RuntimeError, r"^Expected all input tensors to be CUDA tensors, but tensor at index 1 has device cpu$",
           comm.gather, [parts[0], torch.ones(1, 2)])
    raises(RuntimeError, r"^Input tensor at index 1 has invalid shape \[2, 3\], but expected \[2, 2\]$",
           comm.gather, [parts[0], torch.ones(2, 3, device="cuda:0")])


def in_sim_reduce_add_paths() -> None:
    import torch
    import torch.cuda.comm as comm

    one = torch.ones(3, device="cuda:2")
    assert comm.reduce_add([one], destination=2) is one, "one input comes back as is"
    flags = [torch.tensor([True, False], device=f"cuda:{i}") for i in range(3)]
    nccl_path = comm.reduce_add(flags, destination=0)
    assert nccl_path.view(torch.uint8).tolist() == [3, 0], "the NCCL path sums bool as raw bytes"
    fallback = comm.reduce_add(flags + [torch.tensor([True, True], device="cuda:0")], destination=0)
    assert fallback.dtype == torch.bool and fallback.view(torch.uint8).tolist() == [1, 1], "`+` on bool is OR"
    mixed = [torch.ones(2, device="cuda:0"), torch.ones(2, dtype=torch.float64, device="cuda:1")]
    raises(RuntimeError, r"^all inputs and outputs must be of the same Tensor dtype$", comm.reduce_add, mixed, 0)
    raises(RuntimeError, r"^Unconvertible NCCL type ComplexFloat$", comm.reduce_add,
           [torch.ones(2, dtype=torch.complex64, device=f"cuda:{i}") for i in range(2)], 0)
    raises(RuntimeError, r"destination to be on the same GPU with one of the tensors", comm.reduce_add, mixed, 3)


# ----------------------------------------------------------------------------- torch.cuda.nccl
def in_sim_nccl_raw_ops_and_bytes() -> None:
    import torch
    import torch.cuda.nccl as nccl

    ints = [torch.tensor([7, -21, 100], dtype=torch.int8, device=f"cuda:{i}") for i in range(2)]
    for op, expected in [(0, [14, -42, -56]), (1, [49, -71, 16]), (2, [7, -21, 100]), (3, [7, -21, 100]),
                         (4, [7, -21, -28])]:
        outs = [torch.zeros(3, dtype=torch.int8, device=f"cuda:{i}") for i in range(2)]
        nccl.all_reduce(ints, outs, op=op)
        assert [o.tolist() for o in outs] == [expected] * 2, (op, [o.tolist() for o in outs])
    flags = [torch.tensor([True, True, False], device=f"cuda:{i}") for i in range(3)]
    nccl.all_reduce(flags)
    assert [f.view(torch.uint8).tolist() for f in flags] == [[3, 3, 0]] * 3, "bool SUM is a raw uint8 sum"
    chunks = [torch.arange(4.0, device=f"cuda:{i}") + i for i in range(2)]
    outs = [torch.zeros(2, device=f"cuda:{i}") for i in range(2)]
    nccl.reduce_scatter(chunks, outs)
    assert [o.tolist() for o in outs] == [[1.0, 3.0], [5.0, 7.0]]
    gathered = [torch.zeros(2, 3, device=f"cuda:{i}") for i in range(2)]
    nccl.all_gather([torch.full((3,), float(i), device=f"cuda:{i}") for i in range(2)], gathered)
    assert gathered[1].tolist() == [[0.0] * 3, [1.0] * 3]


def in_sim_nccl_broadcast_ignores_root() -> None:
    import torch
    import torch.cuda.nccl as nccl

    tensors = [torch.full((2,), float(i), device=f"cuda:{i}") for i in range(3)]
    nccl.broadcast(tensors, root=2)
    assert [t.tolist() for t in tensors] == [[0.0, 0.0]] * 3, "inputs[0] wins, as in torch (pytorch#179908)"
    raises(RuntimeError, r"^invalid root$", nccl.broadcast, tensors, root=3)


def in_sim_nccl_errors() -> None:
    import torch
    import torch.cuda.nccl as nccl

    two = [torch.ones(2, device=f"cuda:{i}") for i in range(2)]
    raises(RuntimeError, r"^Unconvertible NCCL type Short$", nccl.all_reduce,
           [torch.ones(2, dtype=torch.int16, device=f"cuda:{i}") for i in range(2)])
    raises(RuntimeError, r"^inputs must be on unique devices$", nccl.all_reduce, [two[0], two[0].clone()])
    raises(RuntimeError, r"^input and output elements have to be cuda dense Tensors$", nccl.all_reduce,
           [two[0], torch.ones(2)])
    raises(RuntimeError, r"^all inputs and outputs have to be contiguous$", nccl.all_reduce,
           [two[0], torch.ones(2, 2, device="cuda:1").t().reshape(-1)[::2]])
    raises(RuntimeError, r"^output must be of size input_size \* size_multiplier$", nccl.all_gather, two,
           [torch.zeros(3, device=f"cuda:{i}") for i in range(2)])
    raises(RuntimeError, r"^number of streams is not equal to number of inputs$", nccl.all_reduce, two,
           streams=[None])
    raises(IndexError, r"list index out of range", nccl.reduce, two, root=2)
    raises(RuntimeError, r"^invalid root$", nccl.reduce, two, output=torch.zeros(2, device="cuda:0"), root=-1)
    raises(TypeError, r"Inputs should be a collection of tensors", nccl.all_reduce, two[0])


CASES = [in_sim_broadcast_aliases_the_source, in_sim_broadcast_errors, in_sim_broadcast_coalesced_buffers,
         in_sim_scatter_chunks_and_views, in_sim_scatter_errors,
         in_sim_gather_default_destination_is_the_current_device, in_sim_reduce_add_paths,
         in_sim_nccl_raw_ops_and_bytes, in_sim_nccl_broadcast_ignores_root, in_sim_nccl_errors]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__.removeprefix("in_sim_") for c in CASES])
def test_simulated_primitive(sim: SingleProcessWorker, case: Any) -> None:
    run_in_sim(sim, case)


# ----------------------------------------------------------------------------- pure helpers, in this process
def test_take_tensors_closes_a_buffer_when_it_reaches_the_limit() -> None:
    import torch

    from simgpu.cuda_sim.comm import take_tensors

    f4, f8, i8 = torch.zeros(1), torch.zeros(2), torch.zeros(1, dtype=torch.int64)
    chunks = take_tensors([f4, i8, f8, f4, f8], 12)
    assert [[t.numel() for t in c] for c in chunks] == [[1, 2], [1, 2], [1]]  # f4+f8 = 12 closes; i8 left open
    assert [c[0].dtype for c in chunks] == [torch.float32, torch.float32, torch.int64]
    assert [len(c) for c in take_tensors([f4, f4], 10485760)] == [2]


def test_chunk_rule_of_the_oracle_matches_torch_chunk() -> None:
    import torch

    from conformance.comm.scatter_gather import chunk_sizes

    for size in range(0, 9):
        for parts in range(1, 6):
            assert chunk_sizes(size, parts) == [c.shape[0] for c in torch.empty(size).chunk(parts)], (size, parts)


# ----------------------------------------------------------------------------- the worker itself
def in_sim_pid() -> int:
    return os.getpid()


def in_sim_sleep(seconds: float) -> None:
    time.sleep(seconds)


def in_sim_exit() -> None:
    os._exit(7)


def in_sim_harness_fault() -> None:
    raise KeyError("not the API's error")


def in_sim_devices() -> tuple[int, int, str]:
    import torch

    last = torch.cuda.device_count() - 1
    return torch.cuda.device_count(), torch.cuda.current_device(), str(torch.ones(1, device=f"cuda:{last}").device)


def test_worker_sees_the_simulated_gpus_and_not_the_controller() -> None:
    worker = SingleProcessWorker(DeviceSetup("sim", 4), env=(("CUDA_VISIBLE_DEVICES", ""),), timeout=30.0)
    try:
        assert run_in_sim(worker, in_sim_devices) == (4, 0, "cuda:3")
        assert run_in_sim(worker, in_sim_pid) != os.getpid()
    finally:
        worker.close()
    from simgpu import cuda_sim

    assert not cuda_sim.active(), "the simulation stays in the worker"


def test_a_hung_or_crashed_worker_is_killed_and_replaced() -> None:
    worker = SingleProcessWorker(DeviceSetup("sim", 2), timeout=30.0)
    try:
        first = run_in_sim(worker, in_sim_pid)
        hung = worker.call(in_sim_sleep, 60.0, timeout=1.0)
        assert not hung.ok and "timeout" in hung.broken and "in_sim_sleep" in hung.broken, hung.broken
        assert all_gone([first])
        second = run_in_sim(worker, in_sim_pid)
        assert second != first
        crashed = worker.call(in_sim_exit)
        assert not crashed.ok and "crash" in crashed.broken and "exited with code 7" in crashed.broken
        assert run_in_sim(worker, in_sim_devices)[0] == 2
    finally:
        worker.close()


def test_an_error_outside_the_api_is_reported_as_the_harness_s() -> None:
    worker = SingleProcessWorker(DeviceSetup("sim", 2), timeout=30.0)
    try:
        reply = worker.call(in_sim_harness_fault)
        assert not reply.ok and not reply.broken and "KeyError" in reply.error and "in_sim_harness_fault" in reply.error
    finally:
        worker.close()

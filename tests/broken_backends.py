"""Deliberately broken torch.distributed backends, one per input class of the conformance suite, for
tests/test_broken_backends.py. Each is the simulator (simgpu.backend.SimProcessGroup, NCCL's rules)
with exactly one defect that only that class of input triggers, registered under its own name and
(all but tagblind) held to NCCL's table (conformance.backends.hold_to), so everything else passes:

  offsetblind  a tensor at a storage offset is read and written as if it began at the start of its
               storage (views into a larger buffer, in-place slots)
  offsetspill  gets every view right, then also copies each tensor at a storage offset to the start of
               its storage: only the sentinel around the view sees it
  globalslots  list collectives order their slots by the rank's global position, rotated by
               (global rank - group rank): right on the world and on groups of ranks 0..n-1 only
  tagmatch     point-to-point honours tags (as gloo does) where ProcessGroupNCCL ignores them and
               matches in posting order: visible only with several tagged messages in flight per
               pair, posted in different orders
  boolbytes    SUM on bool (all_reduce, reduce, reduce_scatter*) adds the bytes: True + True is byte 2
  tagblind     the simulator as it is (tags ignored, NCCL's posting order) but registered without a
               table: probed, it is held to torch's contract that a receive gets the send with its tag

Issue 32's, registered without a table: the tests claim NCCL's with --backend-profile=nccl.
  chunktail    a tensor past 1 MiB gets everything but its last, partial MiB (the tail keeps what it held)
  roundzero    float16 SUM (all_reduce, reduce, reduce_scatter*) rounds toward zero instead of to nearest
  emptyrefusal refuses every call whose tensors all have zero elements, the same way on every rank: a
               probed backend gets away with it (`unsup`); one that claims a table must not
  arrivalorder gather fills the root's slots in the order the members' data arrives, not by rank
  skipzero     barrier: the members other than group rank 0 leave once the others have arrived, without
               waiting for rank 0
  passthrough  the simulator as it is: the faithful pass-through the differential tests compare with

Run one with `pytest conformance --backend=offsetblind --backend-module=tests.broken_backends`.
Importing this module registers them all (ranks import it before init_process_group).
"""
from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from conformance.backends import hold_to
from simgpu.backend import SimProcessGroup, SimWork

Tensor = torch.Tensor
COLLECTIVES = ("allreduce", "reduce", "broadcast", "allgather", "all_gather_single", "gather", "scatter",
               "reduce_scatter", "reduce_scatter_single", "alltoall", "all_to_all_single", "send", "recv")


def _at_storage_start(x: Any) -> Any:
    """The same sizes and strides at storage offset 0 (nested lists mapped)."""
    if isinstance(x, Tensor):
        return x.as_strided(x.size(), x.stride(), 0) if x.storage_offset() > 0 else x
    if isinstance(x, list):
        return [_at_storage_start(y) for y in x]
    return x


class OffsetBlind(SimProcessGroup):
    """Defect: ignores storage_offset (of the tensors the caller passes; its own inner calls are right)."""

    name = "offsetblind"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._depth = threading.local()

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return self.name


def _offset_blind(method: str) -> Callable[..., Any]:
    inner = getattr(SimProcessGroup, method)

    def call(self: OffsetBlind, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        try:
            if depth == 0:
                args = tuple(_at_storage_start(a) for a in args)
            return inner(self, *args, **kwargs)
        finally:
            self._depth.n = depth

    call.__name__ = method
    return call


for _method in COLLECTIVES:
    setattr(OffsetBlind, _method, _offset_blind(_method))


def _tensors(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    return [t for y in x for t in _tensors(y)] if isinstance(x, list) else []


class OffsetSpill(SimProcessGroup):
    """Defect: after each call, every tensor passed at a storage offset is also copied to offset 0."""

    name = "offsetspill"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name


def _spilling(method: str) -> Callable[..., Any]:
    inner = getattr(SimProcessGroup, method)

    def call(self: OffsetSpill, *args: Any, **kwargs: Any) -> Any:
        work = inner(self, *args, **kwargs)
        for t in _tensors(list(args)):
            if t.storage_offset() > 0:
                t.as_strided(t.size(), t.stride(), 0).copy_(t.clone())
        return work

    call.__name__ = method
    return call


for _method in COLLECTIVES:
    setattr(OffsetSpill, _method, _spilling(_method))


class GlobalSlots(SimProcessGroup):
    """Defect: the slots of list collectives are rotated by (global rank - group rank) mod n."""

    name = "globalslots"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name

    def _rotated(self, slots: list[Tensor]) -> list[Tensor]:
        shift = (dist.get_rank() - self.rank()) % self.size()
        return slots[shift:] + slots[:shift]

    def allgather(self, output_lists: list[list[Tensor]], inputs: list[Tensor], *args: Any) -> Any:
        return super().allgather([self._rotated(lst) for lst in output_lists], inputs, *args)

    def gather(self, output_lists: list[list[Tensor]], inputs: list[Tensor], *args: Any) -> Any:
        return super().gather([self._rotated(lst) for lst in output_lists], inputs, *args)

    def scatter(self, outputs: list[Tensor], input_lists: list[list[Tensor]], *args: Any) -> Any:
        return super().scatter(outputs, [self._rotated(lst) for lst in input_lists], *args)


class TagMatch(SimProcessGroup):
    """Defect (against NCCL's rule): a receive gets the send with its tag, not the next one posted."""

    name = "tagmatch"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name

    def _p2p_tag(self, tag: int) -> int:
        return tag


class BoolBytes(SimProcessGroup):
    """Defect: SUM on bool reduces the bytes as uint8 (True + True = 2) instead of OR."""

    name = "boolbytes"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name

    @staticmethod
    def _as_bytes(tensors: list[Tensor], opts: Any) -> list[Tensor]:
        if opts.reduceOp == dist.ReduceOp.SUM and all(t.dtype == torch.bool for t in tensors):
            return [t.view(torch.uint8) for t in tensors]
        return tensors

    def allreduce(self, tensors: list[Tensor], opts: Any) -> Any:
        return super().allreduce(self._as_bytes(tensors, opts), opts)

    def reduce(self, tensors: list[Tensor], opts: Any) -> Any:
        return super().reduce(self._as_bytes(tensors, opts), opts)

    def reduce_scatter(self, outputs: list[Tensor], input_lists: list[list[Tensor]], opts: Any) -> Any:
        return super().reduce_scatter(self._as_bytes(outputs, opts),
                                      [self._as_bytes(lst, opts) for lst in input_lists], opts)

    def reduce_scatter_single(self, output: Tensor, input: Tensor, opts: Any) -> Any:  # noqa: A002 - torch's name
        out, inp = self._as_bytes([output, input], opts)
        return super().reduce_scatter_single(out, inp, opts)


class TagBlind(SimProcessGroup):
    """Defect (against torch's contract, which a backend without a table is held to): tags ignored."""

    name = "tagblind"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name


class PassThrough(SimProcessGroup):
    """No defect: the simulator under another name (the differential tests' faithful pass-through)."""

    name = "passthrough"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name


CHUNK_BYTES = 1 << 20

# where each method keeps the tensors it writes (args as torch passes them)
OUTPUTS: dict[str, Callable[..., list[Tensor]]] = {
    "allreduce": lambda tensors, *_: list(tensors),
    "broadcast": lambda tensors, *_: list(tensors),
    "reduce": lambda tensors, *_: list(tensors),
    "allgather": lambda output_lists, *_: [t for lst in output_lists for t in lst],
    "all_gather_single": lambda output, *_: [output],
    "reduce_scatter": lambda outputs, *_: list(outputs),
    "reduce_scatter_single": lambda output, *_: [output],
    "alltoall": lambda outputs, *_: list(outputs),
    "all_to_all_single": lambda output, *_: [output],
    "gather": lambda output_lists, *_: [t for lst in output_lists for t in lst],
    "scatter": lambda outputs, *_: list(outputs),
    "recv": lambda tensors, *_: list(tensors),
}
ALIASES = {"_allgather_base": "all_gather_single", "_reduce_scatter_base": "reduce_scatter_single",
           "alltoall_base": "all_to_all_single"}  # the names older torch calls


def _past_last_whole_chunk(t: Tensor) -> Tensor | None:
    """The elements of t after its last whole MiB (None: t fits in one chunk, or ends on a chunk)."""
    size = t.element_size()
    if not t.is_contiguous() or t.numel() * size <= CHUNK_BYTES:
        return None
    whole = t.numel() * size // CHUNK_BYTES * CHUNK_BYTES // size
    return t.reshape(-1)[whole:] if whole < t.numel() else None


class ChunkTail(SimProcessGroup):
    """Defect: the last, partial chunk of a tensor past 1 MiB is never written (it keeps what it held)."""

    name = "chunktail"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name


def _dropping_tail(method: str) -> Callable[..., Any]:
    inner = getattr(SimProcessGroup, method)

    def call(self: ChunkTail, *args: Any, **kwargs: Any) -> Any:
        tails = [tail for t in OUTPUTS[method](*args) for tail in [_past_last_whole_chunk(t)] if tail is not None]
        held = [tail.clone() for tail in tails]
        work = inner(self, *args, **kwargs)
        if not tails:
            return work

        def restore() -> None:
            for tail, old in zip(tails, held):
                tail.copy_(old)
        return SimWork(work, work.result(), restore)

    call.__name__ = method
    return call


for _method in OUTPUTS:
    setattr(ChunkTail, _method, _dropping_tail(_method))
for _alias, _method in ALIASES.items():
    setattr(ChunkTail, _alias, getattr(ChunkTail, _method))


def _toward_zero(wide: Tensor) -> Tensor:
    """float32 -> float16 rounded toward zero (the defect) instead of to nearest."""
    half = wide.to(torch.float16)
    away = half.float().abs() > wide.abs()  # rounded up in magnitude: one ulp back (sign-magnitude bits)
    bits = half.view(torch.int16).clone()
    bits[away] -= 1
    return bits.view(torch.float16)


class RoundZero(SimProcessGroup):
    """Defect: float16 SUM adds in float32 and rounds the result toward zero (all_reduce, reduce,
    reduce_scatter, reduce_scatter_tensor/_single); other dtypes and ops are the simulator's."""

    name = "roundzero"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name

    @staticmethod
    def _defective(tensors: list[Tensor], opts: Any) -> bool:
        return opts.reduceOp == dist.ReduceOp.SUM and all(
            t.dtype == torch.float16 and t.is_contiguous() for t in tensors)

    def allreduce(self, tensors: list[Tensor], opts: Any) -> Any:
        if not self._defective(tensors, opts):
            return super().allreduce(tensors, opts)
        wide = tensors[0].float()
        super().allreduce([wide], opts).wait()
        tensors[0].copy_(_toward_zero(wide))
        return SimWork(None, tensors)

    def reduce(self, tensors: list[Tensor], opts: Any) -> Any:
        if not self._defective(tensors, opts):
            return super().reduce(tensors, opts)
        wide = tensors[0].float()
        super().reduce([wide], opts).wait()
        if self.rank() == opts.rootRank:
            tensors[0].copy_(_toward_zero(wide))
        return SimWork(None, tensors)

    def reduce_scatter(self, outputs: list[Tensor], input_lists: list[list[Tensor]], opts: Any) -> Any:
        if not self._defective(outputs + [t for lst in input_lists for t in lst], opts):
            return super().reduce_scatter(outputs, input_lists, opts)
        wide = [o.float() for o in outputs]
        super().reduce_scatter(wide, [[t.float() for t in lst] for lst in input_lists], opts).wait()
        for o, w in zip(outputs, wide):
            o.copy_(_toward_zero(w))
        return SimWork(None, outputs)

    def reduce_scatter_single(self, output: Tensor, input: Tensor, opts: Any) -> Any:  # noqa: A002
        if not self._defective([output, input], opts):
            return super().reduce_scatter_single(output, input, opts)
        wide = output.float()
        super().reduce_scatter_single(wide, input.float(), opts).wait()
        output.copy_(_toward_zero(wide))
        return SimWork(None, [output])

    _reduce_scatter_base = reduce_scatter_single


# every tensor a call takes, for the calls whose tensors have the same shapes on every rank (so a refusal
# of all-empty calls is the same on every rank); all_to_all's pieces differ per rank and are not refused
TENSORS: dict[str, Callable[..., list[Tensor]]] = {
    "allreduce": lambda tensors, *_: list(tensors),
    "broadcast": lambda tensors, *_: list(tensors),
    "reduce": lambda tensors, *_: list(tensors),
    "allgather": lambda output_lists, inputs, *_: [t for lst in output_lists for t in lst] + list(inputs),
    "all_gather_single": lambda output, input, *_: [output, input],  # noqa: A002
    "reduce_scatter": lambda outputs, input_lists, *_: list(outputs) + [t for lst in input_lists for t in lst],
    "reduce_scatter_single": lambda output, input, *_: [output, input],  # noqa: A002
    "gather": lambda output_lists, inputs, *_: [t for lst in output_lists for t in lst] + list(inputs),
    "scatter": lambda outputs, input_lists, *_: list(outputs) + [t for lst in input_lists for t in lst],
    "send": lambda tensors, *_: list(tensors),
    "recv": lambda tensors, *_: list(tensors),
}


class EmptyRefusal(SimProcessGroup):
    """Defect: a call whose tensors all have zero elements raises, the same way on every rank."""

    name = "emptyrefusal"

    def getBackendName(self) -> str:  # noqa: N802
        return self.name


def _refusing_empty(method: str) -> Callable[..., Any]:
    inner = getattr(SimProcessGroup, method)

    def call(self: EmptyRefusal, *args: Any, **kwargs: Any) -> Any:
        tensors = TENSORS[method](*args)
        if tensors and all(t.numel() == 0 for t in tensors):
            raise RuntimeError(f"emptyrefusal: {method} of zero-element tensors is not supported")
        return inner(self, *args, **kwargs)

    call.__name__ = method
    return call


for _method in TENSORS:
    setattr(EmptyRefusal, _method, _refusing_empty(_method))
for _alias, _method in ALIASES.items():
    if _method in TENSORS:
        setattr(EmptyRefusal, _alias, getattr(EmptyRefusal, _method))


class ArrivalOrder(SimProcessGroup):
    """Defect: gather fills the root's slots in the order the other members' data arrives (receive from
    any source), not in group-rank order: right whenever they happen to arrive in rank order."""

    name = "arrivalorder"
    TAG = 7331

    def getBackendName(self) -> str:  # noqa: N802
        return self.name

    def gather(self, output_lists: list[list[Tensor]], inputs: list[Tensor], opts: Any) -> Any:
        t, root = inputs[0], opts.rootRank
        if self.size() == 1 or t.numel() == 0 or not t.is_contiguous():
            return super().gather(output_lists, inputs, opts)
        payload = t.reshape(-1).view(torch.uint8)
        if self.rank() != root:
            self.gloo.send([payload.contiguous()], root, self.TAG).wait()
            return SimWork(None, [])
        slots = output_lists[0]
        slots[root].copy_(t)
        for j in [k for k in range(self.size()) if k != root]:  # the next to arrive takes the next free slot
            buffer = torch.empty_like(payload)
            self.gloo.recv_anysource([buffer], self.TAG).wait()
            slots[j].copy_(buffer.view(t.dtype).view(t.shape))
        return SimWork(None, slots)


class SkipZero(SimProcessGroup):
    """Defect: barrier lets the members other than group rank 0 go once the others have all arrived; rank 0
    itself waits for everyone. Wrong only when rank 0 is the last to arrive."""

    name = "skipzero"

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta, *args: Any, **kwargs: Any):
        super().__init__(store, rank, size, timeout, *args, **kwargs)
        self._arrivals = dist.PrefixStore("skipzero/", store)
        self._round = 0

    def getBackendName(self) -> str:  # noqa: N802
        return self.name

    def barrier(self, opts: Any = None) -> Any:
        self._round += 1
        key = f"arrived/{self._round}"
        if self.rank() != 0:
            self._arrivals.add(key, 1)
        deadline = time.monotonic() + self._timeout_s
        while self._arrivals.add(key, 0) < self.size() - 1:  # the members other than rank 0
            if time.monotonic() > deadline:
                raise RuntimeError(f"skipzero: barrier round {self._round} timed out")
            time.sleep(0.001)
        return SimWork(None, [])


BROKEN = {cls.name: cls for cls in (OffsetBlind, OffsetSpill, GlobalSlots, TagMatch, BoolBytes, TagBlind,
                                    ChunkTail, RoundZero, EmptyRefusal, ArrivalOrder, SkipZero, PassThrough)}
HELD_TO_NCCL = ("offsetblind", "offsetspill", "globalslots", "tagmatch", "boolbytes")


def _creator(cls: type) -> Callable[..., SimProcessGroup]:
    def create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> SimProcessGroup:
        return cls(store, rank, size, timeout)

    return create


for _name, _cls in BROKEN.items():
    if _name.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(_name, _creator(_cls), devices=["cpu"])
    if _name in HELD_TO_NCCL:
        hold_to(_name, "nccl")

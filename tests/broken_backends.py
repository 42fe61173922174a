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

Run one with `pytest conformance --backend=offsetblind --backend-module=tests.broken_backends`.
Importing this module registers them all (ranks import it before init_process_group).
"""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from conformance.backends import hold_to
from simgpu.backend import SimProcessGroup

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


BROKEN = {cls.name: cls for cls in (OffsetBlind, OffsetSpill, GlobalSlots, TagMatch, BoolBytes, TagBlind)}
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

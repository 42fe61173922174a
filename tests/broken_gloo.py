"""gloo wrapped by a Python process group, faithful or with one defect, for tests/test_broken_backends.py:
the form a vendor's backend takes (a `dist.ProcessGroup` subclass around a real one), held to gloo's table
with `--backend-profile=gloo`.

  passgloo    every call handed to ProcessGroupGloo as it is: a faithful wrapper, so gloo's own defects
              (conformance/findings.py) are all it may show, and they stay gloo's findings
  logproduct  the same, except that PRODUCT on floating dtypes is computed through logarithms in the
              tensor's own dtype, exp(sum log|x|) with the sign and the special values put back as IEEE
              has them: only its rounding is wrong

Run one with `pytest conformance --backend=logproduct --backend-module=tests.broken_gloo --backend-profile=gloo`.
Importing this module registers them (ranks import it before init_process_group).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from simgpu.backend import PythonGroupNames

Tensor = torch.Tensor
# the ProcessGroup methods torch.distributed's Python layer calls, handed to gloo unchanged
DELEGATED = ("allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather", "_allgather_base",
             "allgather_coalesced", "allgather_into_tensor_coalesced", "gather", "scatter", "reduce_scatter",
             "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base", "send",
             "recv", "recv_anysource", "barrier", "monitored_barrier")
# torch 2.13's names for the single-tensor forms, and gloo's for them
RENAMED = {"all_gather_single": "_allgather_base", "reduce_scatter_single": "_reduce_scatter_base",
           "all_to_all_single": "alltoall_base"}


class GlooPassThrough(PythonGroupNames, dist.ProcessGroup):
    """A Python process group that hands every call to ProcessGroupGloo (loopback only)."""

    name = "passgloo"

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, opts)
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, self.gloo)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return self.name

    def _get_backend(self, device: Any) -> Any:
        return self.gloo


def _delegate(method: str, target: str) -> Callable[..., Any]:
    def call(self: GlooPassThrough, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.gloo, target)(*args, **kwargs)

    call.__name__ = method
    return call


for _method in DELEGATED:
    setattr(GlooPassThrough, _method, _delegate(_method, _method))
for _method, _target in RENAMED.items():
    setattr(GlooPassThrough, _method, _delegate(_method, _target))


class DoneWork(dist.Work):
    """A Work whose result was written before it was returned."""

    def __init__(self, outputs: list[Tensor]):
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


def _opts(cls: type, op: Any, **fields: Any) -> Any:
    o = cls()
    o.reduceOp = op
    for name, value in fields.items():
        setattr(o, name, value)
    return o


class LogProduct(GlooPassThrough):
    """Defect: floating PRODUCT (all_reduce, reduce) as exp(sum of log|x|) in the tensor's dtype, with the
    sign, zeros, infinities and NaN put back as IEEE multiplication has them: only the rounding is wrong."""

    name = "logproduct"

    @staticmethod
    def _defective(t: Tensor, opts: Any) -> bool:
        return opts.reduceOp == dist.ReduceOp.PRODUCT and t.is_floating_point() and t.is_contiguous()

    def _through_logs(self, t: Tensor, reduce: Callable[[Tensor, Any], None]) -> Callable[[], None]:
        """Reduce t's logs, signs and specials with `reduce` (a SUM or MAX collective on a tensor); return
        the step that writes the product into t where reduce put its result."""
        logs = t.abs().log()  # in t's dtype: the defect's rounding
        negatives = t.signbit().to(t.dtype)  # -0 counts: IEEE's sign of a product is that of its factors
        zeros, nans, infs = (t == 0).to(t.dtype), t.isnan().to(t.dtype), t.isinf().to(t.dtype)
        for part, op in ((logs, dist.ReduceOp.SUM), (negatives, dist.ReduceOp.SUM), (zeros, dist.ReduceOp.MAX),
                         (nans, dist.ReduceOp.MAX), (infs, dist.ReduceOp.MAX)):
            reduce(part, op)

        def write() -> None:
            sign = 1 - 2 * (negatives.remainder(2))
            product = logs.exp() * sign
            product = torch.where(zeros > 0, torch.zeros_like(product) * sign, product)
            product = torch.where((nans > 0) | ((zeros > 0) & (infs > 0)), torch.full_like(product, float("nan")),
                                  product)
            t.copy_(product)
        return write

    def allreduce(self, tensors: list[Tensor], opts: Any = None) -> Any:
        if not self._defective(tensors[0], opts):
            return self.gloo.allreduce(tensors, opts)
        write = self._through_logs(tensors[0], lambda part, op: self.gloo.allreduce(
            [part], _opts(dist.AllreduceOptions, op)).wait())
        write()
        return DoneWork(tensors)

    def reduce(self, tensors: list[Tensor], opts: Any = None) -> Any:
        if not self._defective(tensors[0], opts):
            return self.gloo.reduce(tensors, opts)
        root = opts.rootRank
        write = self._through_logs(tensors[0], lambda part, op: self.gloo.reduce(
            [part], _opts(dist.ReduceOptions, op, rootRank=root)).wait())
        if self.rank() == root:
            write()
        return DoneWork(tensors)


WRAPPERS = {cls.name: cls for cls in (GlooPassThrough, LogProduct)}


def _creator(cls: type) -> Callable[..., dist.ProcessGroup]:
    def create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> dist.ProcessGroup:
        return cls(store, rank, size, timeout)

    return create


for _name, _cls in WRAPPERS.items():
    if _name.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(_name, _creator(_cls), devices=["cpu"])

"""A deliberately WRONG torch.distributed backend, "wrongsum", for tests/test_plugin_cli.py.

It is gloo underneath (a Python ProcessGroup wrapping ProcessGroupGloo, the pattern of
torch/testing/_internal/distributed/multi_threaded_pg.py and simgpu/backend.py), except that
all_reduce adds 1 to every element of the reduced tensor. The conformance suite, pointed at it with
`--backend=wrongsum --backend-module=tests.wrong_backend`, must report wrong results.
Importing this module registers the backend (ranks import it before init_process_group).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllreduceOptions, BarrierOptions, BroadcastOptions

from simgpu.backend import PythonGroupNames

BACKEND_NAME = "wrongsum"


class DoneWork(dist.Work):
    """A Work that has already finished (the wrong result is written before it is returned)."""

    def __init__(self, outputs: list[torch.Tensor]):
        super().__init__()
        self._outputs = outputs

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self) -> list[torch.Tensor]:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self._outputs)
        return fut


class WrongSumProcessGroup(PythonGroupNames, dist.ProcessGroup):
    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, opts)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND_NAME

    def allreduce(self, tensors: list[torch.Tensor], opts: AllreduceOptions = AllreduceOptions()) -> dist.Work:
        self._gloo.allreduce(tensors, opts).wait()
        for t in tensors:
            t.add_(1)  # the defect: off by one everywhere
        return DoneWork(list(tensors))

    def broadcast(self, tensors: list[torch.Tensor], opts: BroadcastOptions = BroadcastOptions()) -> dist.Work:
        return self._gloo.broadcast(tensors, opts)

    def barrier(self, opts: BarrierOptions = BarrierOptions()) -> dist.Work:
        return self._gloo.barrier(opts)


def create_wrongsum_process_group(store: dist.Store, rank: int, size: int, timeout: timedelta) -> Any:
    return WrongSumProcessGroup(store, rank, size, timeout)


if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, create_wrongsum_process_group, devices=["cpu"])

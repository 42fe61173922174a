"""The gloo half of a "cpu:gloo,cuda:nccl" group: host tensors travel on a communicator of their own.

On CUDA such a group holds two backends, NCCL for GPU tensors and gloo for host tensors, each with its
own communicator and its own order of collectives. Programs rely on that: PyTorch's asynchronous
checkpointing (`torch.distributed.checkpoint.async_save` on the default group) runs its planning
collectives on host tensors in a background thread while the training thread's FSDP collectives go on
over NCCL. One simulated group serving both in one order made that a false CollectiveMismatch (or, with
the check off, gloo reading one thread's bytes as the other's).

`HostAndGpuGroup` is the simulated group of such a map: a collective whose tensors are all host
tensors runs on a real gloo group (what the program gets on a GPU machine too: gloo's rules, no NCCL
emulation), made on first use by every rank over the group's store; everything else is the simulated
NCCL group, with its strict checks.
"""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten

from simgpu.backend import SimProcessGroup, _make_gloo
from simgpu.cuda_sim import devices

# the collectives torch asks of a group that ProcessGroupGloo has too (barrier stays on the device
# backend, as torch picks it for a group with a GPU backend)
ROUTED = ("allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather", "_allgather_base",
          "allgather_coalesced", "gather", "scatter", "reduce_scatter", "_reduce_scatter_base", "alltoall",
          "alltoall_base", "send", "recv", "recv_anysource")


def _host_only(args: tuple, kwargs: dict) -> bool:
    """Whether every tensor of a call is a host tensor (and there is one)."""
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(devices.device_of(t) is None for t in tensors)


class HostAndGpuGroup(SimProcessGroup):
    """A simulated NCCL group whose host-tensor collectives run on a gloo group of their own."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta, **kwargs: Any):
        super().__init__(store, rank, size, timeout, **kwargs)
        self._host_store = dist.PrefixStore("host-gloo/", store)
        self._host_timeout = timeout
        self._host_group: dist.ProcessGroupGloo | None = None
        self._host_lock = threading.Lock()

    def host_group(self) -> dist.ProcessGroupGloo:
        """The gloo group of host tensors, connected by the first host collective (every rank makes it
        there, so groups that never move host tensors open no second set of connections)."""
        with self._host_lock:
            if self._host_group is None:
                self._host_group = _make_gloo(self._host_store, self.rank(), self.size(), self._host_timeout)
            return self._host_group

    def shutdown(self) -> None:
        if self._host_group is not None and hasattr(self._host_group, "shutdown"):
            self._host_group.shutdown()
        super().shutdown()


def _routed(name: str) -> Callable:
    simulated = getattr(SimProcessGroup, name)

    def method(self: HostAndGpuGroup, *args: Any, **kwargs: Any) -> Any:
        if _host_only(args, kwargs):
            return getattr(self.host_group(), name)(*args, **kwargs)
        return simulated(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"{name}: host tensors on the gloo group, GPU tensors on the simulated NCCL group."
    return method


for _name in ROUTED:
    setattr(HostAndGpuGroup, _name, _routed(_name))

"""GPU time on simulated streams: each stream has a clock, so `torch.cuda._sleep` on two streams overlaps.

A simulated GPU runs every op on the host at issue, so a stream is idle again as soon as the host returns
from an op: its clock is the host's. The one op that stands for GPU time with no host work is
`torch.cuda._sleep` (PyTorch's tests put it on streams as stand-in compute and communication): it moves its
stream's clock ahead of the host instead of holding the host. Events read their stream's clock, stream and
event waits carry clocks between streams, and the calls that make the host wait for a GPU (synchronize,
event and stream synchronize) sleep until the clock they wait for. Without `_sleep` no clock ever passes
the host's, so a program that never calls it sees the host's time, as before (docs/stream-clocks.md).

Clocks are `time.perf_counter()` seconds; a clock at or behind the host's means "idle".
"""
from __future__ import annotations

import threading
import time
from typing import Any

_lock = threading.Lock()
_device_horizon: dict[int, float] = {}  # per device, the latest clock any of its streams reached
_ever_ahead = False  # a clock has passed the host (a _sleep ran): until then collectives need no clock
current_stream: Any = None  # api.current_stream, set by api.py (this module imports nothing of simgpu)


def host_now() -> float:
    return time.perf_counter()


def ready_at(stream: Any) -> float:
    """When the work issued so far on `stream` has ended: its clock, or now if it is idle."""
    return max(stream.gpu_clock, host_now())


def spin(stream: Any, seconds: float, launched: float) -> None:
    """A kernel launched at host time `launched` that keeps `stream` busy `seconds` after its earlier work,
    without holding the host."""
    global _ever_ahead
    _ever_ahead = True
    with _lock:
        stream.gpu_clock = max(stream.gpu_clock, launched) + seconds
        _reach(stream.index, stream.gpu_clock)


def wait_until(stream: Any, moment: float | None) -> None:
    """Later work on `stream` starts no earlier than `moment` (cudaStreamWaitEvent); the host goes on."""
    if moment is None:
        return
    with _lock:
        if moment > stream.gpu_clock:
            stream.gpu_clock = moment
            _reach(stream.index, moment)


def _reach(device: int, moment: float) -> None:
    if moment > _device_horizon.get(device, 0.0):
        _device_horizon[device] = moment


def device_ready_at(device: int) -> float:
    """When every stream of `device` has ended its work (what torch.cuda.synchronize waits for)."""
    return max(_device_horizon.get(device, 0.0), host_now())


def done(moment: float | None) -> bool:
    """Whether GPU work ending at `moment` has ended (event and stream query())."""
    return moment is None or moment <= host_now()


def host_wait(moment: float | None) -> None:
    """The host blocks until `moment` (cudaEventSynchronize, cudaStreamSynchronize, cudaDeviceSynchronize)."""
    if moment is None:
        return
    left = moment - host_now()
    while left > 0:
        time.sleep(left)
        left = moment - host_now()


def collective_issued() -> float | None:
    """At a collective's issue: when it ends on the GPU, i.e. when the issuing stream's earlier work ends (NCCL's
    stream waits for it; the collective itself takes no time here). None while no clock ever ran ahead."""
    if not _ever_ahead or current_stream is None:
        return None
    return ready_at(current_stream())


def collective_waited(ended: float | None, host_blocks: bool = False) -> None:
    """work.wait(): the current stream's later work starts after the collective (as ProcessGroupNCCL's wait
    makes it wait on the NCCL stream); for a barrier the host itself waits, as NCCL's barrier synchronizes."""
    if ended is None:
        return
    if host_blocks:
        host_wait(ended)
    else:
        wait_until(current_stream(), ended)

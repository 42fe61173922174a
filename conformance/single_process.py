"""The single-process worker: one long-lived child process that owns the GPUs, for the APIs that drive
several GPUs from one process (torch.cuda.comm, torch.cuda.nccl, nn.DataParallel, model parallel).

It is a rank pool of one (simgpu.pool.RankPool): forked from the pool's fork server, never from the
controller, so it inherits no torch threads; every call has a deadline, and a worker that crashes or
hangs is killed with its stack dumped and replaced on the next call. Its one-rank gloo process group is
never used. On --backend=nccl it sees the real GPUs (CUDA_VISIBLE_DEVICES as leased, NCCL's safe
settings) and nothing of simgpu is installed; on --backend=sim its first call activates
simgpu.cuda_sim with N simulated GPUs. The controller sends picklable cases and gets plain data back;
it never touches CUDA.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from simgpu.pool import Binding, RankPool, RankPoolError

BACKENDS = ("sim", "nccl")


@dataclass(frozen=True)
class DeviceSetup:
    """What the worker must see: real GPUs (nccl) or simulated ones (sim), and how many at least."""

    backend: str
    devices: int


@dataclass
class WorkerReply:
    """A call's value, or why there is none: `error` (raised in the worker outside the API under test,
    a harness fault) or `broken` (crash or hang: the worker was killed and will be replaced)."""

    value: Any = None
    error: str = ""
    broken: str = ""

    @property
    def ok(self) -> bool:
        return not (self.error or self.broken)


class SingleProcessWorker:
    """The controller's handle on the worker (see the module docstring)."""

    def __init__(self, setup: DeviceSetup, env: tuple[tuple[str, str], ...] = (), timeout: float = 60.0):
        if setup.backend not in BACKENDS:
            raise ValueError(f"single-process worker: backend {setup.backend!r} has no GPUs; use one of {BACKENDS}")
        if setup.backend == "sim":  # the simulated machine has exactly N GPUs, whatever the controller's variable
            env = env + (("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(setup.devices))),)
        self.setup = setup
        self.pool = RankPool(1, Binding("gloo", device="cpu", env=env), timeout=timeout)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> WorkerReply:
        """fn(*args) in the worker (fn importable by name), under the deadline."""
        try:
            outcome = self.pool.run(serve, self.setup, fn, args, timeout=timeout)[0]
        except RankPoolError as exc:
            return WorkerReply(broken=str(exc))
        if not outcome.ok:
            tail = "\n".join((outcome.traceback or "").rstrip().splitlines()[-10:])
            return WorkerReply(error=f"{outcome.error_type}: {outcome.error}\n{tail}")
        return WorkerReply(outcome.value)

    def close(self) -> None:
        self.pool.close()


def serve(ctx: Any, setup: DeviceSetup, fn: Callable[..., Any], args: tuple) -> Any:
    """Worker side: make the devices ready once, then run the call."""
    if ctx.scratch.get("setup") != setup:
        _prepare(setup)
        ctx.scratch["setup"] = setup
    return fn(*args)


def _prepare(setup: DeviceSetup) -> None:
    import torch

    if setup.backend == "sim":
        import simgpu.cuda_sim

        simgpu.cuda_sim.activate(setup.devices)
    count = torch.cuda.device_count()
    if count < setup.devices:
        raise RuntimeError(f"the single-process worker sees {count} GPU(s), {setup.devices} were promised "
                           f"(backend {setup.backend})")

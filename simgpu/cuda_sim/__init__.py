"""N simulated CUDA GPUs in a CPU process: what `simgpu run --gpus N` installs.

`activate(n)` makes torch.cuda report n devices and tensors live on them (devices.py, tensors.py),
gives torch.cuda / torch.accelerator their simulated functions (api.py), torch.cuda.comm and
torch.cuda.nccl their CPU primitives (comm.py), and maps the "nccl" backend of torch.distributed
to the strict simulator (distributed.py). Child processes inherit the simulation through the
environment (SIMGPU_GPUS) and simgpu's sitecustomize (see simgpu/launcher.py).
"""
from __future__ import annotations

import os

from simgpu.cuda_sim.errors import GPUS_ENV, SimulationError
from simgpu.torch_support import unsupported_reason

__all__ = ["activate", "active", "preload", "SimulationError", "check_torch_version"]
_active = False


def check_torch_version(version: str) -> None:
    """SimulationError naming the installed torch when the simulation is not built for it."""
    reason = unsupported_reason(version)
    if reason is not None:
        raise SimulationError(reason)


def active() -> bool:
    return _active


def preload() -> None:
    """Import what activate() installs, installing nothing: a process that forks ranks (the pool's fork
    server) pays the imports once for every rank, whether its ranks simulate GPUs or not. torch._dynamo
    (torch.compiler.set_stance, attention.install) is most of the time activate() takes."""
    import torch._dynamo  # noqa: F401

    from simgpu.cuda_sim import (api, attention, autocast, comm, cuda_build, cuda_kernels,  # noqa: F401
                                 distributed, dtensor_new, fake_tensors, generator_identity, higher_order, random_ops,
                                 serialization, surface, tensors, warning_sites)


def activate(gpus: int | None = None) -> None:
    """Simulate `gpus` GPUs (default: $SIMGPU_GPUS) in this process and in the processes it starts."""
    global _active
    if gpus is not None:
        os.environ[GPUS_ENV] = str(gpus)
    if _active:
        return
    import torch

    check_torch_version(torch.__version__)
    text = os.environ.get(GPUS_ENV, "")
    if not text.isdigit() or int(text) < 1:
        raise SimulationError(f"simgpu: {GPUS_ENV}={text!r}: the number of simulated GPUs must be a positive integer")
    from simgpu.cuda_sim import deferred_imports

    deferred_imports.begin()  # what the simulation imports for itself stays hidden from the program
    preload()
    from simgpu.cuda_sim import (api, attention, autocast, comm, cuda_build, cuda_kernels, distributed, dtensor_new,
                                 fake_tensors, generator_identity, half_fft, half_kernels, higher_order, host_register,
                                 norm_kernels, random_ops, rms_norm, serialization, surface, tensors, tf32_kernels,
                                 warning_sites)

    from simgpu.cuda_sim import plan

    plan.install()  # before tensors.install: a plan's tensors report is_meta as on a GPU
    api.install()
    cuda_build.install()
    dtensor_new.install()
    generator_identity.install()
    surface.install_refusals()
    surface.install_extension_refusals()
    comm.install()
    distributed.install()
    host_register.install()
    serialization.install()
    tensors.install()
    autocast.install()
    cuda_kernels.install()
    attention.install()
    fake_tensors.install()
    higher_order.install()
    random_ops.install()
    half_fft.install()
    half_kernels.install()
    norm_kernels.install()
    rms_norm.install()
    tf32_kernels.install()
    warning_sites.install()
    _active = True
    deferred_imports.finish()

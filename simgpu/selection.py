"""The one place a backend name becomes what the ranks run: checked once, then turned into a Binding.

Both pytest surfaces use it: the `ranks` fixture (simgpu.testing, options --simgpu-backend...) and the
conformance suite (conformance/plugin.py, options --backend...); `option` names whichever the user typed.
"""
from __future__ import annotations

import importlib
from typing import Any

from simgpu.pool import Binding

BUILTIN_BACKENDS = ("sim", "gloo", "nccl")


class BackendChoiceError(ValueError):
    """A backend (or the module that registers it) that cannot work here; the message is one line."""


def check_backend(backend: str, backend_module: str | None, *, local_ranks: bool = True,
                  option: str = "--backend") -> None:
    """Fail at start-up, in one line, for a backend that cannot work here.

    local_ranks: False when the ranks run elsewhere (attached torchrun ranks): this host's GPUs do not matter.
    """
    if backend_module:
        try:
            importlib.import_module(backend_module)
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
            raise BackendChoiceError(f"{option}-module {backend_module!r} failed to import: "
                                     f"{type(exc).__name__}: {exc}") from None
    if backend in BUILTIN_BACKENDS:
        if backend == "nccl" and local_ranks:
            from realgpu import probe_gpus

            probe = probe_gpus()
            if probe.count < 2:
                why = f" ({probe.why_none})" if probe.why_none else ""
                raise BackendChoiceError(f"{option}=nccl needs at least 2 CUDA GPUs; this machine has {probe.count}{why}")
        return
    import torch.distributed as dist

    usable = usable_backends()
    why_not = _torch_backend_unusable(backend.lower())
    if why_not:  # also once torch registered it as a plugin (importing its fake_pg registers "fake")
        raise BackendChoiceError(f"{option}={backend}: {why_not}; choose one of: {', '.join(usable)}")
    if backend.upper() not in dist.Backend._plugins and backend.lower() not in usable:
        hint = "" if backend_module else f" (name the module that registers it with {option}-module)"
        raise BackendChoiceError(f"{option}: unknown backend {backend!r}{hint}; choose one of: {', '.join(usable)}")


def _torch_backend_unusable(name: str) -> str | None:
    """Why a backend torch itself lists cannot run simgpu's ranks here (None: it can, or torch does not
    list it). Each of these used to fail every test with a rank traceback instead of one line."""
    import torch.distributed as dist

    if name == "fake":
        return "torch's fake backend communicates nothing (every rank keeps its own tensors)"
    if name == "mpi":
        return "MPI ranks are started by mpirun, not by simgpu" + ("" if dist.is_mpi_available()
                                                                 else ", and this torch has no MPI built in")
    if name == "xccl":
        return "XCCL needs Intel XPU tensors; simgpu's ranks hold CPU or CUDA tensors"
    if name == "ucc" and not dist.is_ucc_available():
        return "this torch has no UCC built in"
    return None


def usable_backends() -> list[str]:
    """The backend names simgpu's ranks can run here: its own three and any registered plugin."""
    import torch.distributed as dist

    listed = [b for b in dist.Backend.backend_list if b != "undefined"]
    return sorted(set(BUILTIN_BACKENDS) | {b for b in listed if b not in BUILTIN_BACKENDS
                                           and not _torch_backend_unusable(b)})


def binding_for(backend: str, backend_module: str | None = None, *, lease: Any = None,
                simulated_gpus: bool = False, env: tuple[tuple[str, str], ...] = ()) -> Binding:
    """What every rank of a pool initialises for `backend`.

    nccl: rank r on the r-th GPU of `lease` (realgpu.leases; None: the GPUs this process sees), with
    NCCL's safe environment. sim with simulated_gpus: ranks see simulated GPUs (ctx.device is cuda:r),
    as `simgpu run` gives programs. Anything else: the ranks work on the host.
    """
    if backend == "nccl":
        from realgpu import NCCL_SAFE_ENV

        gpu_env = tuple(NCCL_SAFE_ENV.items()) if lease is None else lease.env()
        return Binding(backend, backend_module, "cuda", env=gpu_env + tuple(env))
    device = "simulated-cuda" if backend == "sim" and simulated_gpus else "cpu"
    return Binding(backend, backend_module, device, env=tuple(env))


def attached_ranks(address: str, world_size: int | None, connect_timeout: float, *, option: str,
                   under_xdist: bool) -> Any:
    """The listener for ranks torchrun starts (simgpu.attach) at `address`, checked first."""
    if not world_size or world_size < 1:
        raise BackendChoiceError(f"{option} needs {option}-world-size N: the WORLD_SIZE torchrun starts")
    if under_xdist:
        raise BackendChoiceError(f"{option} cannot be combined with pytest-xdist (-n): one controller serves "
                                 "one torchrun world")
    from simgpu.attach import AttachedRanks, AttachError

    try:
        return AttachedRanks(address, connect_timeout=connect_timeout)
    except AttachError as exc:
        raise BackendChoiceError(f"{option}: {exc}") from None

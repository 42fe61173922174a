"""torch.distributed under simulation: "nccl" means the strict sim backend, held to NCCL's placement.

A program asks for "nccl" (in init_process_group, new_group, or a "cpu:gloo,cuda:nccl" map) and
gets a SimProcessGroup registered as "sim_nccl" for both device types (a map's host tensors on a gloo
group of their own: host_channel.py): every NCCL rule of the sim
backend, plus NCCL's refusal of host tensors, which a CPU simulator would otherwise let through.
Object collectives move their bytes through the current simulated GPU, as they do over NCCL.
`dist.get_backend()` still answers "nccl".
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten

from simgpu.backend import SimProcessGroup
from simgpu.cuda_sim import devices, import_hooks

SIM_NCCL = "sim_nccl"          # "nccl": GPU tensors only, as NCCL
SIM_NCCL_HOST = "sim_nccl_host"  # "cpu:gloo,cuda:nccl" and the like: host tensors too


# The tensor-moving API a program calls; torch's own C++ callers (DDP's reducer) are not checked,
# since the tensors they make in C++ carry no simulated placement.
TENSOR_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
                      "all_gather_single", "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor",
                      "reduce_scatter_single", "all_to_all", "all_to_all_single", "send", "recv", "isend",
                      "irecv", "_all_gather_base", "_reduce_scatter_base")


def _held_to_gpus(original: Callable) -> Callable:
    """NCCL's answer to a host tensor: the group has no backend for the CPU device."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if _called_from_torch():  # torch's own helpers (object collectives) pick their devices
            return original(*args, **kwargs)
        bound = signature.bind_partial(*args, **kwargs)
        group = bound.arguments.get("group")
        if _backend_name(group) == SIM_NCCL:
            for t in tree_flatten([v for k, v in bound.arguments.items() if k != "group"])[0]:
                if isinstance(t, torch.Tensor) and devices.device_of(t) is None:
                    rank = dist.get_rank()
                    raise RuntimeError(
                        f"No backend type associated with device type cpu (simgpu: rank {rank}, "
                        f"{original.__name__}() got a host tensor {tuple(t.shape)} on a 'nccl' group; "
                        f"NCCL only moves GPU tensors: .cuda() it first)")
        return original(*args, **kwargs)

    return collective


_PASS_THROUGH = ("simgpu.cuda_sim.", "torch.overrides", "torch.distributed.c10d_logger")


def _called_from_torch() -> bool:
    """Whether the code that asked for this collective is torch's own (past dispatch wrappers)."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(_PASS_THROUGH):
            return module.startswith("torch.")
        frame = frame.f_back
    return False


def _backend_name(group: Any) -> str | None:
    try:
        return _original_get_backend(group)
    except (RuntimeError, ValueError):
        return None


def _simulated(backend: Any) -> Any:
    """The backend name to really use for what the program asked for."""
    text = "undefined" if backend is None else str(backend).lower()
    if text in (SIM_NCCL, SIM_NCCL_HOST):
        return backend
    if text == "undefined":  # torch's default on a CUDA machine
        return SIM_NCCL_HOST if _default_serves_host() else SIM_NCCL
    if text in _NCCL_NAMES:
        return SIM_NCCL
    if ":" in text and "nccl" in text:  # a device map: "cpu:gloo,cuda:nccl" serves both, "cuda:nccl" GPUs only
        mapped = dict(part.strip().split(":", 1) for part in text.split(",") if ":" in part)
        if any(name in _NCCL_NAMES for name in mapped.values()):
            return SIM_NCCL_HOST if "cpu" in mapped else SIM_NCCL
    return backend


# "nccl" and torch >= 2.15's other NCCL backends (CUDA builds register them on first use; "nccl-lazy" is
# what 2.15's pipelining recommends): each an NCCL group, GPU tensors only
_NCCL_NAMES = ("nccl", "nccl2", "nccl-lazy", "nccl-legacy")


def _default_serves_host() -> bool:
    """Whether this torch's default backend on a CUDA machine also takes host tensors (older
    versions: "cpu:gloo,cuda:nccl"; newer: the accelerator's backend alone)."""
    try:
        config = dist.distributed_c10d.BackendConfig(dist.Backend("undefined"))
        return "cpu" in config.get_device_backend_map()
    except (ValueError, RuntimeError, AttributeError):
        return True


def _new_process_group_helper(original: Callable) -> Callable:
    """Every group torch creates (init_process_group, new_group, DeviceMesh, split_group, FSDP's
    and DTensor's) comes through here: the simulator stands in for NCCL."""
    @functools.wraps(original)
    def helper(group_size: int, group_rank: int, global_ranks: Any, backend: Any, *args: Any, **kwargs: Any) -> Any:
        simulated = _simulated(backend)
        if simulated is not backend:
            backend = dist.Backend(simulated)
        pg, store = original(group_size, group_rank, global_ranks, backend, *args, **kwargs)
        device_id = kwargs.get("device_id", args[5] if len(args) > 5 else None)
        if device_id is not None and isinstance(pg, SimProcessGroup) and pg.bound_device_id is None:
            # torch binds the group it made to device_id (init_process_group(device_id=...), and subgroups
            # inherit the default group's), then takes the simulated group (a ProcessGroup) in its place
            pg.bound_device_id = device_id
        return pg, store

    return helper


def _split_group(original: Callable) -> Callable:
    """torch's split_group (what DeviceMesh uses once the default group is bound to a device) splits the
    parent's NCCL communicator (ncclCommSplit). A simulated parent has none: the splits are made as new
    groups of their ranks (of the default group: by every rank, in order, as DeviceMesh's own new_group path
    does; of a subgroup: each by its own ranks alone), bound to the default group's device as a split is; a
    rank in no split gets what torch returns then. (Each making only its own split with local
    synchronisation hung a 2x2 mesh at 4 ranks.)"""
    try:
        non_member = dist.GroupMember.NON_GROUP_MEMBER if "return GroupMember.NON_GROUP_MEMBER" in \
            inspect.getsource(original) else None  # torch >= 2.15; before: None
    except (OSError, TypeError):
        non_member = None

    @functools.wraps(original)
    def split_group(parent_pg: Any = None, split_ranks: Any = None, timeout: Any = None, pg_options: Any = None,
                    group_desc: Any = None, backend: Any = None) -> Any:
        c10d = dist.distributed_c10d
        default = c10d._get_default_group() if dist.is_initialized() else None
        parent = parent_pg or default
        if (default is None or default.bound_device_id is None or not split_ranks
                or _backend_name(parent) not in (SIM_NCCL, SIM_NCCL_HOST) or parent not in c10d._world.pg_group_ranks
                or default.rank() not in c10d._world.pg_group_ranks[parent]):
            return original(parent_pg, split_ranks, timeout, pg_options, group_desc, backend)  # its own errors
        to_group = c10d._world.pg_group_ranks[parent]
        to_global = {group_rank: global_rank for global_rank, group_rank in to_group.items()}
        me, mine = default.rank(), None
        for split in split_ranks:
            ranks = [to_global[r] for r in sorted(split)]
            if parent is default:  # every rank makes every split, in order, as DeviceMesh's new_group path does
                made = c10d.new_group(ranks, timeout=timeout, backend=backend or c10d._world.pg_map[parent][0],
                                      group_desc=group_desc)
            elif me in ranks:  # a subgroup's split: only its ranks are here, each makes its own
                made = c10d.new_group(ranks, timeout=timeout, backend=backend or c10d._world.pg_map[parent][0],
                                      use_local_synchronization=True, group_desc=group_desc)
            else:
                continue
            if me in ranks:
                mine = made
        return mine if isinstance(mine, dist.ProcessGroup) else non_member

    return split_group


def _mesh_split_group(module: Any) -> None:
    """device_mesh.py holds its own name for split_group (imported from distributed_c10d)."""
    if getattr(module, "split_group", None) is not None:
        module.split_group = dist.distributed_c10d.split_group


def _get_split_source(original: Callable) -> Callable:
    """A group bound to a device (eager NCCL init) makes its subgroups by NCCL communicator splits, and its
    non-members join each split; a simulated group makes every subgroup afresh: nothing to split from."""
    @functools.wraps(original)
    def get_split_source(pg: Any, *args: Any, **kwargs: Any) -> Any:
        if _backend_name(pg) in (SIM_NCCL, SIM_NCCL_HOST):
            return None
        return original(pg, *args, **kwargs)

    return get_split_source


def _init_process_group(original: Callable) -> Callable:
    @functools.wraps(original)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if backend is None and "backend" in kwargs:
            backend = kwargs.pop("backend")
        if backend is None and kwargs.get("device_id") is not None:  # torch picks the device's backend: NCCL
            backend = "nccl"
        return original(_simulated(backend), *args, **kwargs)

    return init_process_group


def _new_group(original: Callable) -> Callable:
    @functools.wraps(original)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = _simulated(kwargs["backend"])
        elif len(args) >= 3:
            args = (*args[:2], _simulated(args[2]), *args[3:])
        return original(*args, **kwargs)

    return new_group


def _get_backend(original: Callable) -> Callable:
    @functools.wraps(original)
    def get_backend(group: Any = None) -> str:
        name = original(group)
        return "nccl" if name == SIM_NCCL else "cpu:gloo,cuda:nccl" if name == SIM_NCCL_HOST else name

    return get_backend


_original_get_backend = dist.get_backend


def _create(store: dist.Store, rank: int, size: int, timeout: Any, devices: tuple[str, ...]) -> SimProcessGroup:
    """A program's NCCL group. A rank that never arrives is reported after the group's own timeout
    (torch's default for NCCL: 10 minutes), as NCCL's watchdog would: a program in which one rank
    evaluates or saves while the others wait at a barrier is correct, however slow the CPU."""
    from simgpu.cuda_sim import plan
    from simgpu.cuda_sim.host_channel import HostAndGpuGroup

    # a group that serves host tensors too has gloo's communicator for them, as on CUDA (host_channel.py);
    # a plan of a sample of ranks keeps SimProcessGroup's stand-in for every group
    kind = HostAndGpuGroup if "cpu" in devices and not os.environ.get(plan.ENV_RANKS) else SimProcessGroup
    return kind(store, rank, size, timeout, devices=devices, strict_timeout=timeout.total_seconds())


def _bucket_buffer(original: Callable) -> Callable:
    def buffer(bucket: Any) -> torch.Tensor:
        """DDP's reducer makes its buckets in C++ from the (host) options of its parameters: a comm
        hook (PowerSGD, fp16 compression) sees them on their parameters' GPU, as on CUDA."""
        flat = original(bucket)
        parameters = bucket.parameters()
        index = devices.device_of(parameters[0]) if parameters else None
        if index is not None and devices.device_of(flat) is None:
            devices.adopt(flat, index)
        return flat

    return buffer


def _all_gather_into_tensor_out(run: Callable, args: tuple, kwargs: dict) -> Any:
    """`_c10d_functional.all_gather_into_tensor_out` (the functional collectives' out= form): its C++ calls
    the group's `_allgather_base` through the dispatcher, which picks the backend by the tensors' device,
    the host here, for which an NCCL group has none ("No backend type associated with device type cpu").
    The group's own `_allgather_base` runs instead, its work registered for `wait_tensor`, as C++ does."""
    values = dict(zip(("input", "group_size", "group_name"), args), **kwargs)
    group = torch._C._distributed_c10d._resolve_process_group(values["group_name"])
    if not isinstance(group, SimProcessGroup):
        return run(*args, **kwargs)
    out = values["out"]
    torch._C._distributed_c10d._register_work(out, group._allgather_base(out, values["input"]))
    return out


def install() -> None:
    from simgpu.cuda_sim import placement

    placement.special(torch.ops._c10d_functional.all_gather_into_tensor_out, _all_gather_into_tensor_out)
    for name, served in ((SIM_NCCL, ("cuda",)), (SIM_NCCL_HOST, ("cpu", "cuda"))):
        if name.upper() not in dist.Backend._plugins:
            dist.Backend.register_backend(name, functools.partial(_create, devices=served), devices=["cpu", "cuda"])
    c10d = dist.distributed_c10d
    c10d._new_process_group_helper = _new_process_group_helper(c10d._new_process_group_helper)
    if hasattr(c10d, "_get_split_source"):
        c10d._get_split_source = _get_split_source(c10d._get_split_source)
    if hasattr(c10d, "split_group"):
        c10d.split_group = _split_group(c10d.split_group)
        if hasattr(dist, "split_group"):
            dist.split_group = c10d.split_group
        import_hooks.after_import("torch.distributed.device_mesh", _mesh_split_group)
    for name in TENSOR_COLLECTIVES:
        if hasattr(dist.distributed_c10d, name):
            wrapped = _held_to_gpus(getattr(dist.distributed_c10d, name))
            setattr(dist.distributed_c10d, name, wrapped)
            if hasattr(dist, name):
                setattr(dist, name, wrapped)
    dist.init_process_group = _init_process_group(dist.init_process_group)
    dist.distributed_c10d.init_process_group = dist.init_process_group
    dist.new_group = _new_group(dist.new_group)
    dist.distributed_c10d.new_group = dist.new_group
    dist.get_backend = _get_backend(dist.get_backend)
    dist.distributed_c10d.get_backend = dist.get_backend
    dist.is_nccl_available = lambda: True
    dist.GradBucket.buffer = _bucket_buffer(dist.GradBucket.buffer)

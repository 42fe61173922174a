"""A simulated group's collectives, shown to the program's own dispatch modes as NCCL's are.

On a GPU, `dist.broadcast`, `dist.scatter` and the other ProcessGroup calls reach NCCL through the
dispatcher (`c10d::broadcast_`, `c10d::scatter_`, ...), so a TorchDispatchMode the program has entered
sees each one: CommDebugMode counts them (PyTorch's DTensor and tensor-parallel tests assert those counts),
a logging mode lists them. SimProcessGroup's collectives are Python methods, which the dispatcher never
sees. So, while such a mode is active, each one first dispatches the same c10d op, with the same tensors
and options, on a stand-in group whose backend is torch's FakeProcessGroup (it moves no data: it writes
only the op's output tensors, which the simulated collective then overwrites); the simulated collective
runs after it. Tracing modes (FakeTensorMode, proxies) are not shown anything (simgpu.cuda_sim.placement).

What Python cannot build is shown as torch's default: the reduce op is a default `ReduceOp` object, the
timeout -1 (the group's own).
"""
from __future__ import annotations

import inspect
import threading
from typing import Any, Callable

import torch
import torch.distributed as dist

_stand_ins: dict[tuple[int, int], Any] = {}
_lock = threading.Lock()


def _stand_in(rank: int, size: int) -> Any:
    """A boxed ProcessGroup of this rank and size whose backend does nothing (one per rank and size)."""
    key = (rank, size)
    with _lock:
        if key not in _stand_ins:
            from torch._C._distributed_c10d import FakeProcessGroup

            group = dist.ProcessGroup(rank, size)
            group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM,
                                    FakeProcessGroup._create_internal(rank, size))
            _stand_ins[key] = group.boxed()
        return _stand_ins[key]


def _async(opts: Any) -> bool:
    return bool(getattr(opts, "asyncOp", True))


def _reduce_op() -> Any:
    return torch.classes.c10d.ReduceOp()


c10d = torch.ops.c10d
# simgpu.backend's name for each collective -> (torch's c10d op, its arguments from the method's)
_ECHOES: dict[str, Callable[[dict, Any], tuple]] = {
    "all_reduce": lambda a, g: (c10d.allreduce_, (a["tensors"], g, _reduce_op(), None, _async(a["opts"]), -1)),
    "all_reduce_coalesced": lambda a, g: (c10d.allreduce_coalesced_,
                                          (a["tensors"], g, _reduce_op(), _async(a["opts"]), -1)),
    "reduce": lambda a, g: (c10d.reduce_, (a["tensors"], g, _reduce_op(), a["opts"].rootRank,
                                           a["opts"].rootTensor, _async(a["opts"]), -1)),
    "broadcast": lambda a, g: (c10d.broadcast_, (a["tensors"], g, a["opts"].rootRank, a["opts"].rootTensor,
                                                 _async(a["opts"]), -1)),
    "all_gather": lambda a, g: (c10d.allgather_, (a["output_lists"], a["inputs"], g, _async(a["opts"]), -1)),
    "all_gather_into_tensor": lambda a, g: (c10d._allgather_base_, (a["output"], a["input"], g,
                                                                   _async(a["opts"]), -1)),
    "reduce_scatter": lambda a, g: (c10d.reduce_scatter_, (a["outputs"], a["input_lists"], g, _reduce_op(),
                                                           _async(a["opts"]), -1)),
    "reduce_scatter_tensor": lambda a, g: (c10d._reduce_scatter_base_, (a["output"], a["input"], g, _reduce_op(),
                                                                        _async(a["opts"]), -1)),
    "gather": lambda a, g: (c10d.gather_, (a["output_lists"], a["inputs"], g, a["opts"].rootRank,
                                           _async(a["opts"]), -1)),
    "scatter": lambda a, g: (c10d.scatter_, (a["outputs"], a["input_lists"], g, a["opts"].rootRank,
                                             _async(a["opts"]), -1)),
    "all_to_all": lambda a, g: (c10d.alltoall_, (a["outputs"], a["inputs"], g, _async(a["opts"]), -1)),
    "all_to_all_single": lambda a, g: (c10d.alltoall_base_, (a["output"], a["input"], g,
                                                             list(a["output_split_sizes"]),
                                                             list(a["input_split_sizes"]), _async(a["opts"]), -1)),
}


def echo(op: str, method: Callable, group: Any, args: tuple, kwargs: dict) -> None:
    """Dispatch the c10d op of `group.<method>(*args, **kwargs)` for the program's dispatch modes, if any
    is active and the collective has a c10d op (barrier and point-to-point calls are not shown)."""
    from simgpu.cuda_sim import placement

    build = _ECHOES.get(op)
    if build is None or not placement.program_mode_active():
        return
    bound = inspect.signature(method).bind(group, *args, **kwargs)
    bound.apply_defaults()
    c10d_op, c10d_args = build(bound.arguments, _stand_in(group.rank(), group.size()))
    c10d_op(*c10d_args)

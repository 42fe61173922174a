"""Control-flow operators' bodies in the shape their autograd expects, with torch.compile running eagerly.

Called eagerly, torch.cond and torch's `map` hand their operator to torch.compile(fullgraph=True), whose
dynamo traces each branch or body into a graph that returns a flat tuple of tensors, and unflattens the
operator's result to the body's structure. The operators' autograd (CondAutogradOp, MapAutogradOp)
relies on that. Under simulation torch.compile runs eagerly (tensors.py), so the bodies are the
program's own functions, and one returning a single tensor (the common case) breaks: torch.cond fails
in backward ("object of type 'bool' has no len()"), map returns a tuple of rows instead of the stacked
tensor. Plain CPU torch does the same under torch.compiler.set_stance("force_eager").

Here those operators' autograd kernels get the bodies as dynamo would give them, outputs flattened, and
their results are unflattened to the bodies' structure, as dynamo does.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

# operator (module, name) -> the positions of its body functions
_BODIES: dict[tuple[str, str], tuple[int, ...]] = {
    ("torch._higher_order_ops.cond", "cond_op"): (1, 2),      # cond_op(pred, true_fn, false_fn, operands)
    ("torch._higher_order_ops.map", "map_impl"): (0,),        # map_impl(f, xs, pos_args)
}


def _flat_bodies(name: str, kernel: Callable, positions: tuple[int, ...]) -> Callable:
    def autograd_kernel(*args: Any) -> Any:
        specs: list[Any] = []

        def flat(fn: Callable) -> Callable:
            if isinstance(fn, torch.fx.GraphModule):  # traced already (dynamo's, export's): flat outputs
                return fn

            def body(*body_args: Any) -> tuple:
                leaves, spec = pytree.tree_flatten(fn(*body_args))
                specs.append(spec)
                return tuple(leaves)

            return body

        args = tuple(flat(a) if i in positions and callable(a) else a for i, a in enumerate(args))
        out = kernel(*args)
        if not specs:
            return out
        if any(spec != specs[0] for spec in specs):
            raise RuntimeError(f"torch {name}: the branches or bodies return different structures: "
                               f"{sorted(set(map(str, specs)))}")
        return pytree.tree_unflatten(list(out), specs[0])

    autograd_kernel.__wrapped__ = kernel  # type: ignore[attr-defined]
    return autograd_kernel


def install() -> None:
    """Give the control-flow operators' autograd kernels flat bodies (operators this torch lacks: skipped)."""
    key = torch._C.DispatchKey.Autograd
    for (module, name), positions in _BODIES.items():
        try:
            op = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        kernel = op.py_kernels.get(key)
        if kernel is not None and not hasattr(kernel, "__wrapped__"):
            op.py_kernels[key] = _flat_bodies(op.name(), kernel, positions)
            getattr(op, "_dispatch_cache", {}).clear()  # kernels looked up before

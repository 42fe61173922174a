"""Single-process training properties (issue #9 part 4), on k real or simulated GPUs.

data_parallel: nn.DataParallel over device_ids gives the gradients of one device on the whole batch, and
after a few SGD steps the same parameters; batch sizes divisible and not by k, smaller than k too.
model_parallel: layers spread over devices, activations moved with .cuda(i) / .to(...), give the
outputs and gradients of the same model on one device; each gradient lives with its parameter.
Tolerances (relative, absolute): float64 1e-9, 1e-12; float32 1e-4, 1e-5 (values of order 1): the
computations differ only in summation order (chunked batches, one more reduction across replicas).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from conformance.comm.cells import SPCase, SPCell, register
from conformance.comm.checks import device_name
from conformance.comm.draw import Draw, device_list
from conformance.comm.worker import Outcome, Tracker

TOLERANCE = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-5)}
TRANSFERS = ["cuda", "to_device", "to_string"]


def _layers(rng: np.random.Generator, widths: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Weights and biases of Linear layers widths[0] -> widths[1] -> ..., scaled as nn.Linear's init."""
    return [(rng.uniform(-1, 1, (b, a)) / np.sqrt(a), rng.uniform(-1, 1, b) / np.sqrt(a))
            for a, b in zip(widths, widths[1:])]


def draw_training(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    widths = [draw(st.integers(1, 6), label="in_features")]
    widths += [draw(st.integers(1, 8), label="width") for _ in range(draw(st.integers(1, 3), label="layers"))]
    if cell.api == "train.data_parallel":
        devices = device_list(draw, n, unique=True)
        k = len(devices)
        batch = draw(st.one_of(st.integers(1, 2 * k + 1), st.integers(1, 3).map(lambda q: q * k)), label="batch")
        params = {"devices": devices, "steps": draw(st.integers(1, 3), label="steps"),
                  "input_on_host": draw(st.booleans(), label="input_on_host")}
        variant = "divisible" if batch % k == 0 else "uneven"
    else:
        placement = [draw(st.integers(0, n - 1), label="layer_device") for _ in widths[1:]]
        params = {"placement": placement,
                  "transfers": [draw(st.sampled_from(TRANSFERS), label="transfer") for _ in placement]}
        batch = draw(st.integers(1, 5), label="batch")
        variant = "spread" if len(set(placement)) > 1 else "one_device"
    params.update(_layers=_layers(rng, widths), _x=rng.standard_normal((batch, widths[0])),
                  _y=rng.standard_normal((batch, widths[-1])), widths=widths, batch=batch, dtype=cell.dtype, lr=0.1)
    return [SPCase(cell.api, variant, 0, [], params)]


def _model(layers: list[tuple[np.ndarray, np.ndarray]], dtype: Any) -> Any:
    import torch
    import torch.nn as nn

    modules: list[Any] = []
    for w, b in layers:
        linear = nn.Linear(w.shape[1], w.shape[0], dtype=dtype)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w))
            linear.bias.copy_(torch.from_numpy(b))
        modules += [linear, nn.Tanh()]
    return nn.Sequential(*modules[:-1])


def run_data_parallel(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch
    import torch.nn as nn

    p = case.params
    dtype = getattr(torch, p["dtype"])
    first = torch.device("cuda", p["devices"][0])
    x, y = (torch.from_numpy(a).to(dtype) for a in (p["_x"], p["_y"]))

    def train(model: Any, forward: Any, inputs: Any) -> dict[str, Any]:
        optimizer = torch.optim.SGD(model.parameters(), lr=p["lr"])
        record: dict[str, Any] = {}
        for step in range(p["steps"]):
            optimizer.zero_grad()
            out = forward(inputs)
            nn.functional.mse_loss(out, y.to(out.device)).backward()
            if step == 0:
                record["output"] = out.detach()
                record["grads"] = [q.grad.detach().clone() for q in model.parameters()]
            optimizer.step()
        record["params"] = [q.detach().clone() for q in model.parameters()]
        return record

    def call() -> dict[str, Any]:
        reference = _model(p["_layers"], dtype).to(first)
        ref = train(reference, reference, x.to(first))
        module = _model(p["_layers"], dtype).to(first)
        parallel = nn.DataParallel(module, device_ids=p["devices"])
        dp = train(module, parallel, x if p["input_on_host"] else x.to(first))
        return {"reference": ref, "parallel": dp}

    return call


def run_model_parallel(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch

    p = case.params
    dtype = getattr(torch, p["dtype"])
    x, y = (torch.from_numpy(a).to(dtype) for a in (p["_x"], p["_y"]))

    def move(h: Any, device: int, how: str) -> Any:
        if how == "cuda":
            return h.cuda(device)
        return h.to(torch.device("cuda", device) if how == "to_device" else f"cuda:{device}")

    def run(placement: list[int]) -> dict[str, Any]:
        linears = [m.to(f"cuda:{d}") for m, d in zip(_model(p["_layers"], dtype)[::2], placement)]
        h = x
        for i, (linear, d, how) in enumerate(zip(linears, placement, p["transfers"])):
            h = linear(move(h, d, how))
            h = torch.tanh(h) if i < len(linears) - 1 else h
        torch.nn.functional.mse_loss(h, y.to(h.device)).backward()
        return {"output": h.detach(), "grads": [q.grad for m in linears for q in (m.weight, m.bias)]}

    return lambda: {"spread": run(p["placement"]), "reference": run([p["placement"][0]] * len(p["placement"]))}


def _close(got: Any, want: Any, dtype: str, what: str) -> list[str]:
    rtol, atol = TOLERANCE[dtype]
    if got.shape != want.shape:
        return [f"{what}: shape {list(got.shape)}, expected {list(want.shape)}"]
    a, b = got.values.astype(np.float64), want.values.astype(np.float64)
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        return []
    worst = np.unravel_index(np.argmax(np.abs(a - b)), a.shape) if a.size else ()
    return [f"{what}: differs by {np.max(np.abs(a - b)):.3g} at {tuple(int(i) for i in worst)} "
            f"(allowed rtol {rtol:g}, atol {atol:g})"]


def _all_on(infos: list[Any], device: int, what: str) -> list[str]:
    wrong = sorted({device_name(i.device) for i in infos if i.device != device})
    return [f"{what} on {', '.join(wrong)}, expected {device_name(device)}"] if wrong else []


def check_data_parallel(case: SPCase, outcome: Outcome) -> list[str]:
    ref, dp = outcome.result["reference"], outcome.result["parallel"]
    dtype, first = case.params["dtype"], case.params["devices"][0]
    problems = _close(dp["output"], ref["output"], dtype, "output")
    for i, (g, r) in enumerate(zip(dp["grads"], ref["grads"])):
        problems += _close(g, r, dtype, f"gradient {i} (step 1)")
    steps = case.params["steps"]
    for i, (q, r) in enumerate(zip(dp["params"], ref["params"])):
        problems += _close(q, r, dtype, f"parameter {i} after {steps} SGD step(s)")
    problems += _all_on([dp["output"]], first, "output") + _all_on(dp["grads"], first, "gradients")
    return problems + _all_on(dp["params"], first, "parameters")


def check_model_parallel(case: SPCase, outcome: Outcome) -> list[str]:
    spread, ref = outcome.result["spread"], outcome.result["reference"]
    dtype, placement = case.params["dtype"], case.params["placement"]
    problems = _close(spread["output"], ref["output"], dtype, "output")
    problems += _all_on([spread["output"]], placement[-1], "output")
    for i, (g, r) in enumerate(zip(spread["grads"], ref["grads"])):
        problems += _close(g, r, dtype, f"gradient {i}") + _all_on([g], placement[i // 2], f"gradient {i}")
    return problems


register(*[SPCell("training", f"train.{kind}", None, draw_training, run, check, dtype=dtype)
           for kind, run, check in [("data_parallel", run_data_parallel, check_data_parallel),
                                    ("model_parallel", run_model_parallel, check_model_parallel)]
           for dtype in TOLERANCE])

"""The host's time per call of common PyTorch work, on a real GPU and as a plan predicts it (issue 33).

    python benchmarks/plan_reference/host_ops.py --out cuda.jsonl                 # on a GPU box
    simgpu run --plan h200-141g --gpus 1 python benchmarks/plan_reference/host_ops.py --out plan.jsonl

Each case runs on tensors so small that the GPU finishes a kernel before the host has launched the next:
the wall time per call on CUDA is then the host's, and a plan's prediction for the same call is the move
of its host clock (plan.Recorder) over the calls. Under a plan the output also gives the program CPU the
plan measured and the simulation's share it took off (plan_host.HostModel), so a gap can be traced to
the op, the launch below it, or the calibration. Set SIMGPU_PLAN_HOST_PROBE_US to this host's speed probe
(`python -m simgpu.cuda_sim.plan_host`) to predict this host itself.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_reference import GPT, Config, loss_fn  # noqa: E402


def cases(device: str) -> dict:
    x = torch.randn(64, 64, device=device)
    w = torch.randn(64, 64, device=device, requires_grad=True)
    lin = torch.nn.Linear(64, 64).to(device)
    ln = torch.nn.LayerNorm(64).to(device)
    q = torch.randn(1, 4, 16, 16, device=device, dtype=torch.bfloat16)
    ws = [torch.randn(64, device=device) for _ in range(50)]
    c = Config(vocab=256, dim=64, heads=4, layers=2, seq=16, batch=2)
    model = GPT(c).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    tokens = torch.randint(0, c.vocab, (c.batch, c.seq), device=device)

    def autocast_linear():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lin(x)

    def model_forward():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            model(tokens)

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(tokens), tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {
        "add": lambda: x + x,
        "view": lambda: x.view(-1),
        "transpose": lambda: x.t(),
        "mm": lambda: x @ x,
        "linear": lambda: F.linear(x, w),
        "linear_module": lambda: lin(x),
        "layernorm_module": lambda: ln(x),
        "sdpa_causal": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "autocast_linear": autocast_linear,
        "mm_fwd_bwd": lambda: (x @ w).sum().backward(),
        "foreach_add_50": lambda: torch._foreach_add_(ws, 1.0),
        "model_forward": model_forward,
        "train_step": train_step,
    }


def _plan_clock():
    """Under a plan: a function returning (host clock us, program CPU us, torch calls, dispatches) so far."""
    try:
        from simgpu.cuda_sim import plan
    except ImportError:
        return None
    recorder = plan.RECORDER
    if recorder is None:
        return None
    recorder._calibrating = True  # the host model, as a plan makes it at its first optimizer step
    try:
        recorder._calibrate()
    finally:
        recorder._calibrating = False

    from simgpu.cuda_sim import placement, workspaces  # cuBLAS's kernels: the GEMMs

    kernels = {"gemm": 0, "foreach": 0, "other": 0}  # the GPU kernels the plan priced, by kind
    price = placement._plan_hook

    def counting(func, args, kwargs, out):
        price(func, args, kwargs, out)
        if not (func.is_view or func.overloadpacket in plan._FREE or recorder._calibrating):
            packet = func.overloadpacket
            kind = "gemm" if packet in workspaces.CUBLAS_OPS else \
                "foreach" if packet.__name__.startswith("_foreach_") else "other"
            kernels[kind] += 1

    placement._plan_hook = counting

    def read():
        with plan._lock:
            recorder._issue(0.0)
            c = recorder.current
            done = sum(s["program_cpu_us"] for s in recorder.steps), sum(s["torch_calls"] for s in recorder.steps), \
                sum(s["dispatches"] for s in recorder.steps)
            return (recorder.host, c["program_cpu_us"] + done[0], c["torch_calls"] + done[1], c["dispatches"] + done[2],
                    dict(kernels))

    return read, recorder



def measure(work, calls: int, repeats: int, plan_clock) -> dict:
    """The least wall us a call over `repeats` runs (CUDA), or the plan's predicted host us a call (median)."""
    for _ in range(3):
        work()
    if plan_clock is None:
        best = float("inf")
        for _ in range(repeats):
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(calls):
                work()
            best = min(best, time.perf_counter() - started)
            torch.cuda.synchronize()
        return {"host_us": best / calls * 1e6}
    read, recorder = plan_clock
    rows = []
    for _ in range(repeats):
        h0, p0, c0, d0, k0 = read()
        steps = len(recorder.steps)
        for _ in range(calls):
            work()
        h1, p1, c1, d1, k1 = read()
        host = (h1 - h0) / calls
        if len(recorder.steps) > steps:  # optimizer steps: a step's host clock restarts where its GPU ends
            host = statistics.median(s["host_us"] for s in recorder.steps[steps:])
        rows.append((host, (p1 - p0) / calls, (c1 - c0) / calls, (d1 - d0) / calls,
                     *((k1[kind] - k0[kind]) / calls for kind in sorted(k0))))
    names = ("host_us", "program_cpu_us", "torch_calls", "dispatches", *(f"kernels_{k}" for k in sorted(k0)))
    out = {name: statistics.median(r[i] for r in rows) for i, name in enumerate(names)}
    return {**out, "probe_us": recorder.probe_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="appends one JSON line")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    plan_clock = _plan_clock()
    results = {}
    for name, work in cases("cuda").items():
        calls = max(args.calls // 20, 5) if name in ("model_forward", "train_step") else args.calls
        results[name] = measure(work, calls, args.repeats, plan_clock)
    line = {"mode": "plan" if plan_clock else "cuda", "torch": torch.__version__, "python": sys.version.split()[0],
            "reference_probe_us": float(os.environ.get("SIMGPU_PLAN_HOST_PROBE_US", "0") or 0) or None,
            "host_model": vars(plan_clock[1].host_model) if plan_clock else None, "cases": results}
    with open(args.out, "a") as f:
        f.write(json.dumps(line) + "\n")
    for name, r in results.items():
        print(f"{name:18s} " + "  ".join(f"{k} {v:9.1f}" for k, v in r.items()))


if __name__ == "__main__":
    main()

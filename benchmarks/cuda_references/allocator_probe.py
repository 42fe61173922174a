"""What the CUDA caching allocator reports for a fixed set of allocation patterns, one fresh process each.

    python benchmarks/cuda_references/allocator_probe.py --json allocator.json          # on a GPU
    python benchmarks/cuda_references/allocator_probe.py --simulated --json sim.json    # under simgpu run

Each scenario runs in its own process (the allocator, cuBLAS's workspaces and cuDNN's are per process)
and prints after every step the memory_allocated, memory_reserved, max_memory_allocated and
max_memory_reserved of GPU 0. The recording on a real GPU is the reference that simgpu's allocator
model (simgpu/cuda_sim/memory.py) is held to by tests/test_allocator_reference.py.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20
SIZES = [1, 511, 512, 513, 4096, MIB - 1, MIB, MIB + 1, 5 * MIB, 10 * MIB - 1, 10 * MIB, 10 * MIB + 1, 25 * MIB + 3]


def _scenario_sizes(step) -> None:
    """Each size alone, then freed and the cache emptied."""
    import torch
    for nbytes in SIZES:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        step(f"empty {nbytes}")
        del t
        step(f"freed {nbytes}")
        torch.cuda.empty_cache()
        step(f"emptied {nbytes}")


def _scenario_caching(step) -> None:
    """Blocks reused from the cache; small blocks sharing a 2 MiB segment; a large block splitting one."""
    import torch
    small = [torch.empty(1000, device="cuda") for _ in range(600)]   # 4000 B -> 4096 B blocks, > 2 MiB
    step("600 small")
    del small[::2]
    step("300 freed")
    again = [torch.empty(1000, device="cuda") for _ in range(300)]
    step("300 again")
    big = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
    step("3 MiB")
    big2 = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
    step("3 MiB more")
    del big
    step("3 MiB freed")
    del big2, again, small
    step("all freed")
    torch.cuda.empty_cache()
    step("emptied")
    torch.cuda.reset_peak_memory_stats()
    step("peaks reset")


def _scenario_matmul(step) -> None:
    """Library workspaces: cuBLAS on the first matmul of a stream, cuBLASLt for bias epilogues."""
    import torch
    import torch.nn.functional as F
    a = torch.randn(64, 64, device="cuda")
    step("inputs")
    c = a @ a
    step("fp32 matmul")
    c = a.bfloat16() @ a.bfloat16()
    step("bf16 matmul")
    c = F.linear(a, a, a[0])
    step("linear with bias")
    c = torch.baddbmm(a[None], a[None], a[None])
    step("baddbmm")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        d = a @ a
    torch.cuda.synchronize()
    step("matmul on a second stream")
    del c, d


def _scenario_training(step) -> None:
    """A small MLP's forward, backward and AdamW step, twice."""
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda()
    step("model")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512, device="cuda")
    for i in range(2):
        loss = model(x).square().mean()
        step(f"forward {i}")
        loss.backward()
        step(f"backward {i}")
        opt.step()
        opt.zero_grad()
        step(f"optimizer {i}")


def _scenario_attention(step) -> None:
    """scaled_dot_product_attention forward and backward in bf16 (flash/efficient kernels' buffers)."""
    import torch
    import torch.nn.functional as F
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    step("q")
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    step("sdpa forward")
    out.sum().backward()
    step("sdpa backward")


def _scenario_conv(step) -> None:
    """A conv layer's forward and backward (cuDNN's workspace)."""
    import torch
    import torch.nn as nn
    conv = nn.Conv2d(16, 32, 3, padding=1).cuda()
    x = torch.randn(8, 16, 32, 32, device="cuda", requires_grad=True)
    step("inputs")
    y = conv(x)
    step("conv forward")
    y.sum().backward()
    step("conv backward")


SCENARIOS = {name[len("_scenario_"):]: fn for name, fn in globals().items() if name.startswith("_scenario_")}


def _one(name: str) -> None:
    """Runs one scenario in this process and prints its steps as JSON lines."""
    import torch
    torch.cuda.set_device(0)

    def step(label: str) -> None:
        torch.cuda.synchronize()
        print(json.dumps({"step": label, "allocated": torch.cuda.memory_allocated(0),
                          "reserved": torch.cuda.memory_reserved(0),
                          "max_allocated": torch.cuda.max_memory_allocated(0),
                          "max_reserved": torch.cuda.max_memory_reserved(0)}), flush=True)
    SCENARIOS[name](step)


def record(simulated: bool, timeout: float) -> dict:
    results = {}
    for name in SCENARIOS:
        cmd = [sys.executable, __file__, "--scenario", name]
        if simulated:
            cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", "1", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        results[name] = {"returncode": done.returncode, "steps": steps,
                         "stderr_tail": done.stderr[-2000:] if done.returncode else ""}
        print(f"{name}: exit {done.returncode}, {len(steps)} steps", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--simulated", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    if args.scenario:
        _one(args.scenario)
        return
    import torch
    meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "simulated": args.simulated,
            "device": "simulated" if args.simulated else torch.cuda.get_device_name(0),
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "command": " ".join(sys.argv)}
    out = {"meta": meta, "scenarios": record(args.simulated, args.timeout)}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

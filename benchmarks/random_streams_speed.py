"""What drawing CUDA's random numbers costs on simulated GPUs: one op on a simulated GPU (Philox4x32-10
with CUDA's launch rules, simgpu/cuda_sim/random_ops.py) against the draw simulated GPUs made before
(torch's CPU kernel seeded from the GPU's stream: CudaGenerator.run), same size, in one process, as a ratio.

    python benchmarks/random_streams_speed.py --elements 100000000 --json benchmarks/results/random-speed-2core.json

It runs itself under `simgpu run --gpus 1`; each op alternates the two draws --repeats times (so a change of
load on the machine hits both alike) and reports the medians and their ratio (CUDA's numbers / before).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

OPS = ["randn", "rand", "uniform_", "normal_", "randint", "bernoulli_", "dropout"]


def _inner(elements: int, repeats: int) -> dict:
    import torch
    import torch.nn.functional as F

    from simgpu.cuda_sim import generators

    stream = generators.default(0)
    x = torch.ones(elements, device="cuda")
    host = x.cpu()
    calls = {  # (CUDA's numbers on the simulated GPU, the draw before: a CPU kernel on a stream-seeded generator)
        "randn": (lambda: torch.randn(elements, device="cuda"), lambda g: torch.randn(elements, generator=g)),
        "rand": (lambda: torch.rand(elements, device="cuda"), lambda g: torch.rand(elements, generator=g)),
        "uniform_": (lambda: x.uniform_(-0.1, 0.1), lambda g: host.uniform_(-0.1, 0.1, generator=g)),
        "normal_": (lambda: x.normal_(0.0, 0.02), lambda g: host.normal_(0.0, 0.02, generator=g)),
        "randint": (lambda: torch.randint(0, 1000, (elements,), device="cuda"),
                    lambda g: torch.randint(0, 1000, (elements,), generator=g)),
        "bernoulli_": (lambda: x.bernoulli_(0.5), lambda g: host.bernoulli_(0.5, generator=g)),
        "dropout": (lambda: F.dropout(x, 0.1),  # before: the CPU composite (bernoulli_, div_, mul)
                    lambda g: host * torch.empty_like(host).bernoulli_(0.9, generator=g).div_(0.9)),
    }
    calls["randn"][0]()  # the MUFU table loads once per process
    results = {}
    for name in OPS:
        cuda_like, before = calls[name]
        times: dict[str, list[float]] = {"cuda": [], "before": []}
        for _ in range(repeats):
            start = time.perf_counter()
            cuda_like()
            times["cuda"].append(time.perf_counter() - start)
            start = time.perf_counter()
            stream.run(before)
            times["before"].append(time.perf_counter() - start)
        cuda_s, before_s = statistics.median(times["cuda"]), statistics.median(times["before"])
        results[name] = {"cuda_numbers_s": round(cuda_s, 3), "before_s": round(before_s, 3),
                         "ratio": round(cuda_s / before_s, 2)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=100_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(_inner(args.elements, args.repeats)))
        return
    cmd = [sys.executable, "-m", "simgpu", "run", "--gpus", "1", __file__, "--inner",
           "--elements", str(args.elements), "--repeats", str(args.repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env={**os.environ})
    if done.returncode:
        sys.exit(f"random_streams_speed: the simulated run failed:\n{done.stderr[-3000:]}")
    results = {"elements": args.elements, "repeats": args.repeats, "cpus": os.cpu_count(),
               "ops": json.loads(done.stdout.strip().splitlines()[-1])}
    for name, r in results["ops"].items():
        print(f"{name:12s} CUDA's numbers {r['cuda_numbers_s']:8.3f} s   before {r['before_s']:8.3f} s   "
              f"ratio {r['ratio']:6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

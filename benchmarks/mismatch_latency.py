"""How fast the sim backend turns a mismatched collective into an error on every rank.

For each of five mismatch kinds (collective, element count, dtype, root, reduce op), rank 0 and
rank 1 make calls that disagree in exactly that respect. Every rank notes when it arrives at its
call and when its error comes back; latency = last error - last arrival (the promise:
"fails at once with a per-rank diff instead of hanging"). Reports the median per kind and overall.

    python benchmarks/mismatch_latency.py [--ranks 2] [--repeats 20]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

KINDS = ("collective", "count", "dtype", "root", "op")


def mismatched_call(ctx: Any, kind: str) -> dict:
    """Rank side: make a call that disagrees with rank 0's in `kind`; report arrival and error times."""
    import torch
    import torch.distributed as dist

    odd = ctx.rank == 1
    t = torch.ones(4)
    calls = {
        "collective": lambda: dist.broadcast(t, src=0) if odd else dist.all_reduce(t),
        "count": lambda: dist.all_reduce(torch.ones(5) if odd else t),
        "dtype": lambda: dist.all_reduce(t.double() if odd else t),
        "root": lambda: dist.broadcast(t, src=1 if odd else 0),
        "op": lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX if odd else dist.ReduceOp.SUM),
    }
    arrived = time.monotonic()
    try:
        calls[kind]()
    except Exception as exc:  # noqa: BLE001 - the error is the measurement
        return {"arrived": arrived, "failed": time.monotonic(), "error": type(exc).__name__}
    return {"arrived": arrived, "failed": None, "error": None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)

    from simgpu.pool import Binding, RankPool

    sys.path.insert(0, ".")
    from benchmarks import mismatch_latency as me  # ranks import the function by this name

    medians = {}
    with RankPool(args.ranks, Binding("sim"), timeout=60) as pool:
        for kind in KINDS:
            latencies = []
            for _ in range(args.repeats):
                outcomes = pool.run(me.mismatched_call, kind)
                values = [o.value for o in outcomes]
                if not all(o.ok and v["failed"] is not None for o, v in zip(outcomes, values)):
                    print(f"{kind}: some rank did not get an error: {[o.describe() for o in outcomes]}")
                    return 1
                errors = {v["error"] for v in values}
                latencies.append(max(v["failed"] for v in values) - max(v["arrived"] for v in values))
            medians[kind] = statistics.median(latencies)
            print(f"{kind:<10}  errors {sorted(errors)}  median {1e3 * medians[kind]:7.2f} ms"
                  f"  max {1e3 * max(latencies):7.2f} ms  ({args.repeats} runs, {args.ranks} ranks)")
    print(f"median over the five kinds: {1e3 * statistics.median(medians.values()):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What two allocator histories hold at their peaks, side by side: a plan's against a real GPU's.

    python benchmarks/plan_reference/peak_diff.py PLAN.pickle GPU.pickle [--depth 4]

Each file is a `torch.cuda.memory._dump_snapshot` (`llama_3d.py --snapshot DIR` writes one a rank, on GPUs and
under a plan; `.pickle.gz` is read too). For each, the blocks alive at the moment allocated memory peaks, from
the device trace, grouped by the innermost `--depth` frames of the program and torch (simgpu's own frames
skipped, file and function names only: line numbers differ between torch versions); the groups that differ
most come first. It found what a plan's llama_3d stages held over the H200's (docs/plan-mode.md).
"""
from __future__ import annotations

import argparse
import collections
import gzip
import pickle
from pathlib import Path


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return pickle.load(f)


def alive_at_peak(snapshot: dict) -> tuple[int, dict[int, dict]]:
    """The peak of allocated bytes in the busiest device's trace and the blocks alive then (addr -> entry)."""
    trace = max(snapshot["device_traces"], key=len)
    live: dict[int, dict] = {}
    current = peak = 0
    best: dict[int, dict] = {}
    for entry in trace:
        if entry["action"] == "alloc":
            live[entry["addr"]] = entry
            current += entry["size"]
            if current > peak:
                peak, best = current, dict(live)
        elif entry["action"] in ("free_requested", "free_completed"):
            gone = live.pop(entry["addr"], None)
            if gone is not None:
                current -= gone["size"]
    return peak, best


def _key(entry: dict, depth: int) -> str:
    frames = [f for f in entry["frames"] if "simgpu" not in f["filename"] and not f["filename"].endswith("_device.py")]
    return " < ".join(f"{Path(f['filename']).name}:{f['name']}" for f in frames[:depth])


def grouped(path: Path, depth: int) -> tuple[int, collections.Counter, collections.Counter]:
    peak, live = alive_at_peak(_load(path))
    sizes: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for entry in live.values():
        key = _key(entry, depth)
        sizes[key] += entry["size"]
        counts[key] += 1
    return peak, sizes, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="a snapshot (the plan's)")
    parser.add_argument("b", type=Path, help="another (the GPU's)")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--rows", type=int, default=15)
    args = parser.parse_args()
    peak_a, sizes_a, counts_a = grouped(args.a, args.depth)
    peak_b, sizes_b, counts_b = grouped(args.b, args.depth)
    mib = float(1 << 20)
    print(f"peak allocated in the trace: A {peak_a / mib:.1f} MiB, B {peak_b / mib:.1f} MiB")
    keys = sorted(set(sizes_a) | set(sizes_b), key=lambda k: -abs(sizes_a[k] - sizes_b[k]))
    for key in keys[:args.rows]:
        print(f"{(sizes_a[key] - sizes_b[key]) / mib:+9.1f} MiB  A {sizes_a[key] / mib:8.1f} ({counts_a[key]:3d})  "
              f"B {sizes_b[key] / mib:8.1f} ({counts_b[key]:3d})  {key}")


if __name__ == "__main__":
    main()

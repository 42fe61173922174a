"""Runs a program unmodified and, when it exits, writes each GPU's caching-allocator peaks to a file.

    python -m benchmarks.peak_memory_probe script.py [args...]                  # one process
    torchrun --nproc-per-node 2 -m benchmarks.peak_memory_probe script.py ...   # one file per rank

The same probe runs on real GPUs and under `simgpu run`, so the two sides' figures come from the same
calls (torch.cuda.max_memory_allocated / max_memory_reserved and the current values). Files go to
$PEAK_MEMORY_DIR as rank<RANK>-pid<pid>.json; a GPU this process never allocated on is left out.
"""
from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
from pathlib import Path


def peaks() -> dict[str, dict[str, int]]:
    """Per GPU index this process touched: peak and current allocated/reserved bytes."""
    import torch

    out = {}
    for index in range(torch.cuda.device_count()):
        reserved_peak = torch.cuda.max_memory_reserved(index)
        if reserved_peak:
            out[str(index)] = {"max_allocated": torch.cuda.max_memory_allocated(index),
                               "max_reserved": reserved_peak,
                               "allocated": torch.cuda.memory_allocated(index),
                               "reserved": torch.cuda.memory_reserved(index)}
    return out


def _write(folder: Path) -> None:
    rank = os.environ.get("RANK", "0")
    record = {"rank": int(rank), "gpus": peaks()}
    (folder / f"rank{rank}-pid{os.getpid()}.json").write_text(json.dumps(record) + "\n")


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m benchmarks.peak_memory_probe SCRIPT [ARGS...]")
    folder = Path(os.environ["PEAK_MEMORY_DIR"])
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, str(Path(script).resolve().parent))
    atexit.register(_write, folder)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()

"""CPU time of each thread of this process (Linux: /proc/self/task/<tid>/schedstat, nanoseconds), so that
a real step's host can be split into its threads: the main thread's Python, autograd's device thread
(backward on CUDA runs there: `pt_autograd_0`), NCCL's and the caching allocator's own threads. A step
whose wall time is more than its threads' CPU waited (for the GPU, a peer, a thread handing over).

    before = thread_cpu.snapshot(); step(); per_name_ms = thread_cpu.since(before)
"""
from __future__ import annotations

import os
import statistics
import threading
from collections import defaultdict


def snapshot() -> dict[int, tuple[str, int]]:
    """Each live thread's name and its CPU time so far (ns); {} where /proc has no schedstat."""
    out: dict[int, tuple[str, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
        out[int(tid)] = (name, ns)
    return out


def since(before: dict[int, tuple[str, int]], main_tid: int | None = None) -> dict[str, float]:
    """CPU ms per thread name since `before` (threads of one name summed; a thread started since counts
    all its time); the calling thread (or `main_tid`) is "main"."""
    main_tid = main_tid or threading.get_native_id()
    now = snapshot()
    out: dict[str, float] = defaultdict(float)
    for tid, (name, ns) in now.items():
        spent = ns - before.get(tid, (name, 0))[1]
        if spent > 0:
            out["main" if tid == main_tid else name] += spent / 1e6
    return dict(out)


def medians(steps: list[dict[str, float]]) -> dict[str, float]:
    """Per thread name, the median over steps of its CPU ms (0 in a step it did not run in)."""
    names = sorted({name for step in steps for name in step})
    return {name: round(statistics.median(step.get(name, 0.0) for step in steps), 3) for name in names} if steps else {}

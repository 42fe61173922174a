"""The C library's malloc settings `simgpu run` gives its processes (on unless SIMGPU_MALLOC_DEFAULTS=0):
keep freed host memory for reuse, as a GPU's caching allocator does.

A simulated GPU's memory is host memory from glibc's malloc. On a GPU, PyTorch's caching allocator keeps
the blocks a step frees and the next step reuses them; glibc by default gives large freed memory back to
the system (its trim and mmap thresholds adapt to the order of allocations, and the heap of a thread
other than the main one is unmapped once empty), and the next step faults the same pages in again.
Simulated, the backward pass runs on autograd's device thread (as on CUDA) and AdamW takes its foreach
kernels (as on CUDA), so a step's memory comes and goes in larger pieces than the same program's on
plain CPU tensors: 3-4 times plain's minor page faults a step, up to a third of the simulation's CPU
overhead (docs/simgpu-run.md, benchmarks/simgpu_overhead.py).

Each variable below that the environment does not set is set for the run's processes: memory up to
32 MiB (glibc's own ceiling for its adaptive threshold) comes from the heap, a heap gives memory back
only once 64 MiB are free at its top (glibc's rule: twice that threshold), and keeps 32 MiB there
(instead of 128 KiB; what keeps a thread's emptied 64 MiB heap mapped). A process keeps more of its peak
use, as the caching allocator does: measured, a small DDP rank's unique memory grew by about 8 MB (a top
pad of 64 MiB cost 54 MB and 16 MiB did not keep the thread's heap). On by default since a quiet-machine
A/B in one run (2026-11-27, benchmarks/results/simgpu-overhead-2core-2026-11-27-r32-malloc-ab.json: 3
alternating runs each of DDP and FSDP2 at 2 and 4 ranks) gave less CPU per step with them in 11 of 12
paired runs (medians 2-13% less, faults a step 20-4,300 against 9,300-20,000). A variable the user sets
(or `glibc.malloc.*` in GLIBC_TUNABLES) wins; SIMGPU_MALLOC_DEFAULTS=0 sets none (glibc's own adaptive
behaviour). No torch import: the launcher uses it.
"""
from __future__ import annotations

import platform
from typing import Mapping

ENV = "SIMGPU_MALLOC_DEFAULTS"
# glibc reads these when a process starts (mallopt's M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD);
# the GLIBC_TUNABLES name of each is given so a setting through that route is honoured too.
DEFAULTS = {
    "MALLOC_MMAP_THRESHOLD_": ("glibc.malloc.mmap_threshold", str(32 * 2**20)),
    "MALLOC_TRIM_THRESHOLD_": ("glibc.malloc.trim_threshold", str(64 * 2**20)),
    "MALLOC_TOP_PAD_": ("glibc.malloc.top_pad", str(32 * 2**20)),
}


def defaults(env: Mapping[str, str], libc: str | None = None) -> dict[str, str]:
    """The malloc variables to add to `env` for a simulated run: those the user did not set (none where the
    C library is not glibc, or with SIMGPU_MALLOC_DEFAULTS=0). ValueError for a switch other than 0 or 1."""
    switch = env.get(ENV, "1")
    if switch not in ("0", "1"):
        raise ValueError(f"{ENV} must be 0 (glibc's own malloc behaviour) or 1 (simgpu's defaults), got {switch!r}")
    libc = platform.libc_ver()[0] if libc is None else libc
    if switch == "0" or libc != "glibc":
        return {}
    tunables = env.get("GLIBC_TUNABLES", "")
    return {name: value for name, (tunable, value) in DEFAULTS.items()
            if name not in env and f"{tunable}=" not in tunables}

"""Facts about collectives, kept once: canonical names, the names torch, NCCL and nccl-tests give them,
and nccl-tests' bus-bandwidth factor. The specs, the cost model, the comm log and the benchmarks read
them here. Plain data: no torch, no hypothesis.

A collective's size in bytes is what nccl-tests prints for the call: the larger of one rank's send
and receive buffers (simgpu.comm_log.nccl_tests_bytes computes it from a call's arguments).
"""
from __future__ import annotations

from typing import Any

RING = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")  # NCCL runs them as rings/trees
PEER_TO_PEER = ("all_to_all", "scatter", "gather", "sendrecv")                # NCCL runs them as point-to-point
COLLECTIVES = RING + PEER_TO_PEER

# every other name of a collective -> its canonical name (torch's API names, nccl-tests' binaries, the
# c10d ops the simulator records). barrier: NCCL runs it as a one-element all_reduce.
ALIASES = {
    "all_gather_into_tensor": "all_gather", "all_gather_single": "all_gather", "allgather": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_single": "reduce_scatter",
    "all_to_all_single": "all_to_all", "alltoall": "all_to_all",
    "all_reduce_coalesced": "all_reduce", "allreduce": "all_reduce", "barrier": "all_reduce",
    "send": "sendrecv", "recv": "sendrecv", "send_recv": "sendrecv", "isend_irecv": "sendrecv",
    "batch_isend_irecv": "sendrecv",
}
# collectives that move no payload nccl-tests would count (bus factor 0)
NO_PAYLOAD = ("barrier", "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
              "all_gather_object_list", "send_object_list", "recv_object_list")
# nccl-tests' binary for each collective (<name>_perf)
NCCL_TESTS_BINARY = {c: c for c in COLLECTIVES} | {"all_to_all": "alltoall"}


def canonical(name: str) -> str:
    """The canonical name of a collective (KeyError naming the known ones for anything else)."""
    name = ALIASES.get(name, name)
    if name not in COLLECTIVES:
        raise KeyError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)} and {', '.join(ALIASES)}")
    return name


# how much of the buffer crosses each rank's link, per nccl-tests: "ar" 2(n-1)/n, "one" 1, "ring" (n-1)/n
_FACTOR_KIND = {"all_reduce": "ar", "broadcast": "one", "reduce": "one", "sendrecv": "one",
                "all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "ring", "scatter": "ring",
                "gather": "ring"}


def bus_factor(name: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md there): busbw = algbw x factor, on n ranks."""
    if name in NO_PAYLOAD:
        return 0.0
    kind = _FACTOR_KIND[canonical(name)]
    if kind == "one":
        return 1.0
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n if kind == "ar" else (n - 1) / n


def bus_factors(names: list[str], n: Any) -> Any:
    """bus_factor of many calls at once (numpy; n >= 2 per call), for the cost model's calibration."""
    import numpy as np

    kinds = np.array([_FACTOR_KIND[canonical(c)] for c in names])
    n = np.asarray(n, dtype=float)
    return np.where(kinds == "ar", 2 * (n - 1) / n, np.where(kinds == "one", 1.0, (n - 1) / n))

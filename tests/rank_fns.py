"""Functions the rank processes of tests/test_pool.py run (importable by name, as RankPool requires).

Each takes the RankContext first, as RankPool.run calls fn(ctx, *args).
"""
from __future__ import annotations

import os
import subprocess
import time
from typing import Any


class RankFailure(Exception):
    """An exception type of this module, to see how the pool names non-builtin exceptions."""


def whoami(ctx: Any) -> dict:
    """Identity of the process that served the call, plus a per-process call counter."""
    ctx.scratch["calls"] = ctx.scratch.get("calls", 0) + 1
    return {"rank": ctx.rank, "world": ctx.world_size, "pid": os.getpid(), "calls": ctx.scratch["calls"],
            "backend": ctx.backend}


def gloo_sum(ctx: Any, value: int) -> list[int]:
    """A real collective through the pool's process group: all_reduce of (value + rank)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value + ctx.rank, 1], dtype=torch.int64)
    dist.all_reduce(t)
    return t.tolist()


def echo(ctx: Any, *args: Any) -> tuple:
    return (ctx.rank, *args)


def raise_on(ctx: Any, bad_rank: int, message: str) -> str:
    """Raise RankFailure on `bad_rank`; the others return normally (no collective, so nothing waits)."""
    if ctx.rank == bad_rank:
        explode_here(message)
    return f"rank {ctx.rank} fine"


def explode_here(message: str) -> None:
    raise RankFailure(message)


def exit_on(ctx: Any, bad_rank: int, code: int) -> str:
    """Kill this rank process outright (no exception, no reply) on `bad_rank`."""
    if ctx.rank == bad_rank:
        os._exit(code)
    return "survived"


def hang_forever_on(ctx: Any, bad_rank: int) -> str:
    """Sleep (far) past any test timeout on `bad_rank`."""
    if ctx.rank == bad_rank:
        hang_forever()
    return "prompt"


def hang_forever() -> None:
    time.sleep(600)


def raise_or_block_in_barrier(ctx: Any, bad_rank: int) -> str:
    """`bad_rank` raises at once; every other rank waits in a barrier that can never complete."""
    if ctx.rank == bad_rank:
        raise ValueError(f"rank {ctx.rank} refuses to join")
    blocked_in_barrier()
    return "barrier passed (impossible)"


def blocked_in_barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def spawn_sleeper(ctx: Any) -> int:
    """Start a grandchild process (inherits the rank's process group) and return its pid."""
    proc = subprocess.Popen(["sleep", "300"])
    ctx.scratch.setdefault("sleepers", []).append(proc)
    return proc.pid


def skip_on(ctx: Any, ranks: list[int]) -> str:
    """pytest.skip on the listed ranks, pass elsewhere (skip unanimity)."""
    import pytest

    if ctx.rank in ranks:
        pytest.skip(f"rank {ctx.rank} has no GPU of the right kind")
    return "ran"


def leak_thread_exception(ctx: Any, bad_rank: int) -> str:
    """Return normally, but let a background thread on bad_rank die with an exception."""
    import threading

    def boom() -> None:
        raise ValueError(f"background failure on rank {ctx.rank}")

    if ctx.rank == bad_rank:
        t = threading.Thread(target=boom, name="leaky-worker")
        t.start()
        t.join()
    return "returned"


def all_reduce_unless_busy(ctx: Any, busy_rank: int, seconds: float) -> list[float]:
    """Every rank but busy_rank all_reduces; busy_rank is somewhere else for `seconds`."""
    import torch
    import torch.distributed as dist

    if ctx.rank == busy_rank:
        busy_elsewhere(seconds)
        return []
    t = torch.ones(2)
    dist.all_reduce(t)
    return t.tolist()


def busy_elsewhere(seconds: float) -> None:
    time.sleep(seconds)


def simulated_gpu_rank(ctx: Any) -> tuple[str, list[float], str]:
    """On a pool bound to simulated GPUs: the rank's device, an all_reduce on it, a host tensor refused."""
    import torch
    import torch.distributed as dist

    t = torch.full((2,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(t)
    try:
        dist.all_reduce(torch.ones(1))
        refused = "accepted"
    except RuntimeError as exc:
        refused = str(exc)
    return f"{t.device} current={torch.cuda.current_device()} count={torch.cuda.device_count()}", t.tolist(), refused


def bench_corrupted_check(ctx: Any, collective: str, placement: str) -> tuple[bool, str]:
    """realgpu.bench_ops on CPU ranks: launch, then change one output element, then run the oracle check."""
    from realgpu.bench_ops import COLLECTIVES, Buffers, Plan, counts

    col = COLLECTIVES[collective]
    plan = Plan(collective, [256], flavor="gloo", placements=(placement,))
    chunk, total = counts(col, 256, 4, ctx.world_size)
    buffers = Buffers(ctx, col, chunk, total, plan, placement)
    buffers.fill()
    waited = buffers.launch()
    out = buffers.recv[0] if isinstance(buffers.recv, list) else buffers.recv
    if out is not None:
        out.view(-1)[-1] += 1  # one element off by one, on every rank that holds an output
    return buffers.check(waited if isinstance(waited, list) else [])


def bench_late_rank_time(ctx: Any, delay_s: float) -> float:
    """realgpu.bench_ops.time_eager on CPU ranks, where rank 1 leaves the barrier `delay_s` late:
    the time per launch each rank reports (ms)."""
    import time

    from realgpu import bench_ops

    on_time = bench_ops._barrier

    def late_barrier(timer: Any) -> None:
        on_time(timer)
        if ctx.rank == 1:
            time.sleep(delay_s)

    bench_ops._barrier = late_barrier
    try:
        col = bench_ops.COLLECTIVES["all_reduce"]
        plan = bench_ops.Plan("all_reduce", [64], iters=2, warmup=1, flavor="gloo", placements=("in",))
        buffers = bench_ops.Buffers(ctx, col, 16, 16, plan, "in")
        buffers.fill()
        return bench_ops.time_eager(buffers, plan, bench_ops.Timer(ctx.device)) / 1e3
    finally:
        bench_ops._barrier = on_time


# ----------------------------------------------------------------------------- replies of every kind (issue 19)
def _refuse_to_load(what: str) -> None:
    raise ValueError(f"{what} cannot be rebuilt here")


class LoadsOnlyOnRanks:
    """Pickles fine on a rank, fails to unpickle in the controller (a class the controller cannot build)."""

    def __reduce__(self) -> tuple:
        return (_refuse_to_load, ("a LoadsOnlyOnRanks value",))


class UnprintableError(Exception):
    """An exception whose __str__ itself raises."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of UnprintableError is broken")


def answer(ctx: Any, kinds: list[str], token: int, sleep_s: float = 0.0) -> Any:
    """Reply as kinds[rank] says: "ok" (rank, token), "raise", "unpicklable" (a lambda: the rank cannot
    send it), "unloadable" (the controller cannot unpickle it), "unprintable" (an exception whose
    __str__ raises). sleep_s first, so the controller can be interrupted while it waits."""
    time.sleep(sleep_s)
    kind = kinds[ctx.rank]
    if kind == "raise":
        raise RankFailure(f"rank {ctx.rank} refuses call {token}")
    if kind == "unpicklable":
        return lambda: token
    if kind == "unloadable":
        return LoadsOnlyOnRanks()
    if kind == "unprintable":
        raise UnprintableError()
    return (ctx.rank, token)


def exit_after_answer(ctx: Any, bad_rank: int, code: int, after_s: float) -> str:
    """Answer, then (on bad_rank) exit with `code` from a background thread `after_s` seconds later."""
    import threading

    if ctx.rank == bad_rank:
        threading.Timer(after_s, os._exit, (code,)).start()
    return "answered"


def p2p_pair(ctx: Any, send_spec: tuple, recv_spec: tuple, blocking: bool = True) -> list[float]:
    """Rank 0 sends a tensor of send_spec (numel, dtype name), rank 1 receives into recv_spec; then a
    second, matching message, to show the pair is usable when the first one agreed."""
    import torch
    import torch.distributed as dist

    if ctx.rank == 0:
        t = torch.arange(send_spec[0], dtype=getattr(torch, send_spec[1]), device=ctx.device)
        if blocking:
            dist.send(t, dst=1)  # send-site
        else:
            dist.isend(t, dst=1).wait()
        return t.tolist()
    t = torch.zeros(recv_spec[0], dtype=getattr(torch, recv_spec[1]), device=ctx.device)
    if blocking:
        dist.recv(t, src=0)  # recv-site
    else:
        dist.irecv(t, src=0).wait()
    return t.tolist()


def p2p_exchange(ctx: Any, n: int) -> list[float]:
    """Both ranks isend first, then irecv (an isend must not wait for its peer's irecv), n times."""
    import torch
    import torch.distributed as dist

    peer = 1 - ctx.rank
    got = []
    for i in range(n):
        out = torch.full((3,), float(ctx.rank * 10 + i), device=ctx.device)
        into = torch.zeros(3, device=ctx.device)
        send = dist.isend(out, dst=peer)
        recv = dist.irecv(into, src=peer)
        recv.wait()
        send.wait()
        got.append(into[0].item())
    return got

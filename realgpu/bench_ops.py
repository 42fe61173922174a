"""Rank side of realgpu.bench: one collective at one size as buffers plus a launch, timed, then checked.

Sizes follow nccl-tests (src/<collective>.cu, GetCollByteCount): `size` bytes become a per-rank
element count, rounded down to 16-byte chunks where the buffer is split between ranks, and the
printed size is the larger of the send and receive buffers. The buffers are torch tensors on the
rank's device; the launch is the public torch.distributed call a user would make.

Every result is checked once against the NumPy oracle through the conformance spec's own
one-rank check (CollectiveSpec.check_rank), on the rank that holds it, after the timing: the
inputs are refilled with a deterministic pattern (distinct per rank and position, integer-valued
so that float sums are exact), the collective runs once more (the same launch, or a one-launch
CUDA graph in graph mode) and the output is compared with what the spec says it must be.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from simgpu.collective_facts import NCCL_TESTS_BINARY


# The pattern's period: prime, so a chunk delivered to the wrong offset shows up (chunk sizes are
# multiples of 16 bytes, never of 61 elements except by accident of the size itself).
PERIOD = 61
POISON = 99  # outside the pattern's values: an element nothing wrote fails the check


@dataclass(frozen=True)
class Collective:
    """A benchmarked collective: the conformance spec it is checked by, its buffers and its placements."""

    name: str
    specs: str            # the conformance spec(s), "a|b": the first this torch has
    split: str            # "none": one buffer of count; "out": output = n chunks; "in": input = n chunks; "peer": n x n
    placements: tuple[str, ...]
    reduces: bool = False
    rooted: bool = False

    def spec(self) -> Any:
        """The conformance spec this torch has (all_gather_single on 2.12+, all_gather_into_tensor before)."""
        from conformance.spec import all_specs

        available = all_specs()
        for name in self.specs.split("|"):
            if name in available:
                return available[name]
        raise RuntimeError(f"torch.distributed has none of {self.specs.replace('|', ', ')} for {self.name}")


COLLECTIVES: dict[str, Collective] = {c.name: c for c in (
    Collective("all_reduce", "all_reduce", "none", ("in",), reduces=True),
    Collective("all_gather", "all_gather_single|all_gather_into_tensor", "out", ("out", "in")),
    Collective("reduce_scatter", "reduce_scatter_single|reduce_scatter_tensor", "in", ("out", "in"), reduces=True),
    Collective("broadcast", "broadcast", "none", ("in",), rooted=True),
    Collective("reduce", "reduce", "none", ("in",), reduces=True, rooted=True),
    Collective("all_to_all", "all_to_all_single", "peer", ("out",)),
    Collective("scatter", "scatter", "out", ("out",), rooted=True),
    Collective("gather", "gather", "in", ("out",), rooted=True),
    Collective("sendrecv", "isend_irecv", "none", ("out",)),
)}
# nccl-tests' binary names, for the comparison
NCCL_TESTS_NAMES = NCCL_TESTS_BINARY


def counts(collective: Collective, size: int, elt: int, n: int) -> tuple[int, int]:
    """(chunk, total): elements per rank-chunk and per whole buffer, as nccl-tests sizes them."""
    count = size // elt
    if collective.split == "none":
        return count, count
    chunk = (count // n) & ~(max(16 // elt, 1) - 1)
    return chunk, chunk * n


@dataclass
class Plan:
    """What every rank runs for one collective: the sizes and how to time them."""

    collective: str
    sizes: list[int]
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    iters: int = 20
    warmup: int = 5
    graph_launches: int = 0       # 0: eager; N: capture `iters` launches in a CUDA graph, replay N times
    placements: tuple[str, ...] = ("out", "in")
    check: bool = True
    flavor: str = "nccl"
    trials: int = 1               # timed runs of `iters` launches; the median counts (nccl-tests: one)


@dataclass
class Result:
    """One rank's figure for one (size, placement): time per launch and the oracle's verdict."""

    size: int
    count: int
    placement: str
    time_us: float
    ok: bool = True
    detail: str = ""


def pattern(rank: int, salt: int, count: int, dtype: Any, device: Any) -> Any:
    """Integer values in [-30, 30] (0..60 for unsigned dtypes) repeating with PERIOD, in an order of
    their own per (rank, salt): a random permutation, so that no shift of one rank's data equals
    another's (a linear pattern made all_to_all's transposed result pass at some chunk sizes)."""
    import torch

    generator = torch.Generator().manual_seed(1_000_003 * rank + salt)
    base = torch.randperm(PERIOD, generator=generator).to(device)
    if dtype in (torch.uint8, torch.bool):
        values = base
    else:
        values = base - 30
    reps = -(-count // PERIOD) if count else 0
    return values.repeat(reps)[:count].to(dtype)


class Buffers:
    """One collective's tensors for one size and placement, its launch and the output its check reads."""

    def __init__(self, ctx: Any, col: Collective, chunk: int, total: int, plan: Plan, placement: str):
        import torch

        from conformance.dtypes import DTYPES

        self.ctx, self.col, self.plan = ctx, col, plan
        self.n, self.me = ctx.world_size, ctx.rank
        self.chunk, self.total, self.placement = chunk, total, placement
        self.dtype = DTYPES[plan.dtype].torch_dtype()
        dev = ctx.device
        empty = lambda k: torch.empty(k, dtype=self.dtype, device=dev)  # noqa: E731
        n, me = self.n, self.me
        if col.split == "none":
            self.send = empty(total)
            self.recv = self.send if placement == "in" else empty(total)
        elif col.name == "all_gather":
            self.recv = empty(total)
            self.send = self.recv[me * chunk:(me + 1) * chunk] if placement == "in" else empty(chunk)
        elif col.name == "reduce_scatter":
            self.send = empty(total)
            self.recv = self.send[me * chunk:(me + 1) * chunk] if placement == "in" else empty(chunk)
        elif col.name == "all_to_all":
            self.send, self.recv = empty(total), empty(total)
        elif col.name == "scatter":
            self.recv = empty(chunk)
            self.send = [empty(chunk) for _ in range(n)] if me == plan.root else None
        elif col.name == "gather":
            self.send = empty(chunk)
            self.recv = [empty(chunk) for _ in range(n)] if me == plan.root else None
        self.launch = self._launcher()

    def _launcher(self) -> Callable[[], Any]:
        import torch.distributed as dist

        from conformance.collectives.common import reduce_op

        name, plan, n, me = self.col.name, self.plan, self.n, self.me
        send, recv = self.send, self.recv
        op = reduce_op(plan.op) if self.col.reduces else None
        if name == "all_reduce":
            return lambda: dist.all_reduce(send, op=op)
        if name == "broadcast":
            return lambda: dist.broadcast(send, src=plan.root)
        if name == "reduce":
            return lambda: dist.reduce(send, dst=plan.root, op=op)
        if name in ("all_gather", "reduce_scatter"):  # the function of the spec: *_single on torch 2.12+
            fn = getattr(dist, self.col.spec().name)
            return (lambda: fn(recv, send)) if name == "all_gather" else (lambda: fn(recv, send, op=op))
        if name == "all_to_all":
            return lambda: dist.all_to_all_single(recv, send)
        if name == "scatter":
            return lambda: dist.scatter(recv, send, src=plan.root)
        if name == "gather":
            return lambda: dist.gather(send, recv, dst=plan.root)
        if name == "sendrecv":
            ops = [dist.P2POp(dist.isend, send, (me + 1) % n), dist.P2POp(dist.irecv, recv, (me - 1) % n)]
            return lambda: [w.wait() for w in dist.batch_isend_irecv(ops)]
        raise ValueError(f"no launch for {name!r}")

    def inputs_for(self, rank: int) -> list[Any]:
        """The pattern tensors `rank` contributes (the check regenerates every rank's)."""
        dev, dt = self.ctx.device, self.dtype
        name = self.col.name
        if name == "scatter":  # the root's list: chunk j goes to rank j
            return [pattern(self.plan.root, j, self.chunk, dt, dev) for j in range(self.n)]
        if name in ("all_gather", "gather"):
            return [pattern(rank, 0, self.chunk, dt, dev)]
        return [pattern(rank, 0, self.total, dt, dev)]

    def fill(self) -> None:
        """Poison the receive buffer(s), then write this rank's pattern into the send buffer(s) (which
        may lie inside the receive buffer: in-place)."""
        outs = self.recv if isinstance(self.recv, list) else [self.recv] if self.recv is not None else []
        for out in outs:
            out.fill_(POISON)
        mine = self.inputs_for(self.me)
        sends = self.send if isinstance(self.send, list) else [self.send] if self.send is not None else []
        for dst, src in zip(sends, mine):
            dst.copy_(src)

    def check(self, waited: Any) -> tuple[bool, str]:
        """The spec's one-rank oracle check of what the last launch left in the buffers."""
        from conformance.spec import Case
        from conformance.tensors import arrays

        spec = self.col.spec()
        n, name = self.n, self.col.name
        # the inputs this rank's verdict reads: none on a non-root of reduce/gather, the previous rank's
        # for sendrecv, every rank's otherwise (n copies of the buffer in host memory)
        needed = range(n)
        if name in ("reduce", "gather") and self.me != self.plan.root:
            needed = range(0)
        elif name == "sendrecv":
            needed = [(self.me - 1) % n]
        per_rank = [arrays(self.inputs_for(r)) if r in needed else [None] for r in range(n)]
        case = Case(spec.name, n, self.plan.dtype, self.plan.op if self.col.reduces else None,
                    root=self.plan.root)
        if name == "scatter":
            case.inputs = per_rank[self.plan.root]
        elif name == "sendrecv":  # one message per direction (p2p.ring_cases' k = 1)
            case.inputs = per_rank
            case.params.update(tags=[0], send_order=[0], recv_order=[0], matching="tag")
        else:
            case.inputs = [x[0] for x in per_rank]
        if name == "all_gather":
            case.params.update(out_shape=(self.total,), stacked=False, in_place=self.placement == "in")
        elif name == "reduce_scatter":
            case.params.update(out_shape=(self.chunk,), in_place=self.placement == "in")
        elif name == "all_to_all":
            case.params.update(rows=[[self.chunk] * n for _ in range(n)], default_splits=True)
        if name == "sendrecv":
            out = {"from_prev": [arrays(self.recv)], "waited": list(waited)}
        else:
            out = {"out": arrays(self.recv) if self.recv is not None else None, "waited": None}
        verdict = spec.check_rank(case, self.me, out, self.plan.flavor)
        return verdict.ok, verdict.message


class Timer:
    """CUDA events on the current stream for GPUs; the host clock for CPU backends (their calls block)."""

    def __init__(self, device: Any):
        self.cuda = getattr(device, "type", "cpu") == "cuda"

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def start(self) -> None:
        if self.cuda:
            import torch

            self._begin, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._begin.record()
        else:
            self._t0 = time.perf_counter()

    def stop_ms(self) -> float:
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            return float(self._begin.elapsed_time(self._end))
        return (time.perf_counter() - self._t0) * 1e3


def _align(timer: Timer, launch: Callable[[], Any]) -> None:
    """Start every rank's timed region together: a barrier and an idle device, then one untimed
    launch of the collective itself, after which each rank's start event is recorded.

    The barrier alone is not enough: a rank whose host leaves it late records its start event late,
    and the others' timed regions then hold the wait for it (H200, 2026-11-22: reduce_scatter 256 B on
    4 GPUs, three ranks at 305 us a launch and the late one at 49, in all five trials). Behind a
    collective on the same stream, the start events fire when it completes, which is at once on every
    rank, however late a host came.
    """
    _barrier(timer)
    launch()


def _barrier(timer: Timer) -> None:
    """Every rank here, with an idle device."""
    import torch.distributed as dist

    timer.sync()
    dist.barrier()
    timer.sync()


def time_eager(buffers: Buffers, plan: Plan, timer: Timer) -> float:
    for _ in range(plan.warmup):
        buffers.launch()
    _align(timer, buffers.launch)
    timer.start()
    for _ in range(plan.iters):
        buffers.launch()
    return timer.stop_ms() * 1e3 / plan.iters


def _capture(launch: Callable[[], Any], times: int) -> Any:
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(times):
            launch()
    return graph


def time_graph(buffers: Buffers, plan: Plan, timer: Timer) -> float:
    """nccl-tests' -G: `iters` launches captured in one CUDA graph, the graph replayed `graph_launches` times."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture: communicators and connections exist before it
        for _ in range(plan.warmup):
            buffers.launch()
    torch.cuda.current_stream().wait_stream(side)
    graph = _capture(buffers.launch, plan.iters)
    graph.replay()
    _align(timer, graph.replay)
    timer.start()
    for _ in range(plan.graph_launches):
        graph.replay()
    elapsed = timer.stop_ms()
    del graph
    return elapsed * 1e3 / (plan.iters * plan.graph_launches)


def _checked_launch(buffers: Buffers, plan: Plan, timer: Timer) -> tuple[bool, str]:
    """Refill, launch once (as a one-launch graph in graph mode), check against the oracle.

    send/recv's Work.wait() results are part of its check in eager mode; a captured graph has no
    Work objects on the host, so there only the data is checked."""
    buffers.fill()
    _barrier(timer)
    waited: Any = []
    if plan.graph_launches:
        _capture(buffers.launch, 1).replay()
    else:
        returned = buffers.launch()
        waited = returned if isinstance(returned, list) else []
    timer.sync()
    return buffers.check(waited)


def bench_rank(ctx: Any, plan: Plan) -> list[Result]:
    """Rank function (RankPool.run): every size and placement of plan.collective on this rank."""
    import torch

    col = COLLECTIVES[plan.collective]
    timer = Timer(ctx.device)
    elt = torch.empty((), dtype=_torch_dtype(plan.dtype)).element_size()
    results = []
    for size in plan.sizes:
        chunk, total = counts(col, size, elt, ctx.world_size)  # the larger buffer holds `total` (nccl-tests' size)
        if total == 0:
            continue  # under one 16-byte chunk per rank: nccl-tests prints a zero-byte row, nothing moves
        for placement in plan.placements:
            if placement not in col.placements:
                continue
            buffers = Buffers(ctx, col, chunk, total, plan, placement)
            buffers.fill()
            measure = time_graph if plan.graph_launches else time_eager
            time_us = statistics.median(measure(buffers, plan, timer) for _ in range(plan.trials))
            ok, detail = _checked_launch(buffers, plan, timer) if plan.check else (True, "not checked")
            shown_count = total if col.split == "none" else chunk  # nccl-tests' count column: its paramcount
            results.append(Result(total * elt, shown_count, placement, time_us, ok, detail))
            del buffers
    return results


def _torch_dtype(name: str) -> Any:
    from conformance.dtypes import DTYPES

    return DTYPES[name].torch_dtype()

"""The "sim" backend on real rank processes: NCCL's rules, NCCL's arithmetic, and the strict check.

Functions named `rank_*` run on every rank of a warm pool (RankPool calls fn(ctx, *args)); the
tests run in the controller and look at every rank's outcome.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from simgpu.pool import Binding, RankPool

STRICT_MISMATCH = "simgpu.strict.CollectiveMismatch"
STRICT_TIMEOUT = "simgpu.strict.CollectiveTimeout"


def _sim_pool(world_size):
    """A started pool of sim ranks, closed when the module's tests are done."""
    pool = RankPool(world_size, Binding("sim"), timeout=60.0)
    pool.start()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def pool2():
    yield from _sim_pool(2)


@pytest.fixture(scope="module")
def pool3():
    yield from _sim_pool(3)


def values(outcomes):
    """Every rank's return value; fails with every rank's error if any rank raised."""
    bad = [o for o in outcomes if not o.ok]
    assert not bad, "\n".join(f"{o.describe()}\n{o.traceback}" for o in bad)
    return [o.value for o in outcomes]


def errors(outcomes, error_type, pattern):
    """Assert every rank raised error_type with a message matching pattern; return the messages."""
    for o in outcomes:
        assert not o.ok, f"rank {o.rank} did not raise (returned {o.value!r})"
        assert o.error_type == error_type, o.describe()
        assert re.search(pattern, o.error), o.describe()
    return [o.error for o in outcomes]


# ----------------------------------------------------------------------------- rank side
CASES = {}


def case(fn):
    """Register a rank-side case; tests run it on every rank with pool.run(rank_call, name, ...)."""
    CASES[fn.__name__] = fn
    return fn


def rank_call(ctx, name, *args):
    """Run CASES[name] on this rank (one importable entry point for all cases)."""
    return CASES[name](ctx, *args)


@case
def all_reduce(ctx, dtype, op, shape=(2,)):
    t = torch.zeros(shape, dtype=dtype)
    dist.all_reduce(t, op=op)
    return t


@case
def non_contiguous_all_reduce(ctx):
    dist.all_reduce(torch.zeros(3, 2).t())


@case
def non_contiguous_all_to_all_single(ctx):
    dist.all_to_all_single(torch.empty(2 * ctx.world_size, 3), torch.zeros(3, 2 * ctx.world_size).t())


@case
def non_contiguous_gather(ctx):
    gather_list = [torch.empty(3, 2) for _ in range(ctx.world_size)] if ctx.rank == 0 else None
    dist.gather(torch.zeros(2, 3).t(), gather_list, dst=0)


@case
def premul_int(ctx):
    dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0))


@case
def rs_tensor_size(ctx):
    dist.reduce_scatter_tensor(torch.empty(3), torch.zeros(2 * ctx.world_size))


@case
def rs_tensor_dtype(ctx):
    dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.int64), torch.zeros(2 * ctx.world_size))


@case
def ag_tensor_size(ctx):
    dist.all_gather_into_tensor(torch.empty(2 * ctx.world_size + 1), torch.zeros(2))


@case
def recv_any(ctx):
    dist.recv(torch.empty(2))  # no src: NCCL has no recv-from-any-source


@case
def int_avg(ctx, dtype, per_rank):
    t = torch.tensor(per_rank[ctx.rank], dtype=dtype)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t.tolist()


@case
def int_avg_async(ctx):
    t = torch.tensor([7, -7], dtype=torch.int64) * (ctx.rank + 1)
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    return t.tolist()


@case
def bool_ops(ctx):
    a = [[True, False, False, True], [False, False, True, True]][ctx.rank % 2]
    out = {}
    for name in ("SUM", "PRODUCT", "MIN", "MAX"):
        t = torch.tensor(a)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
        out[name] = (str(t.dtype), t.tolist())
    return out


@case
def reduce_non_dst(ctx, op_name):
    t = torch.full((3,), float(ctx.rank + 1))
    dist.reduce(t, dst=1, op=getattr(dist.ReduceOp, op_name))
    return t.tolist()


@case
def uneven_all_gather(ctx):
    x = torch.full((ctx.rank + 1, 2), float(ctx.rank))
    outs = [torch.empty(j + 1, 2) for j in range(ctx.world_size)]
    dist.all_gather(outs, x)
    return [o.tolist() for o in outs]


@case
def even_all_gather_non_contiguous_outputs(ctx):
    x = torch.arange(4.0).reshape(2, 2) + 10 * ctx.rank
    outs = [torch.empty(2, 2).t() for _ in range(ctx.world_size)]
    dist.all_gather(outs, x)
    return [o.tolist() for o in outs]


@case
def one_element_stride_zero(ctx):
    x = torch.tensor(float(ctx.rank + 1)).expand(1)  # "contiguous", stride 0
    outs = [torch.empty(1) for _ in range(ctx.world_size)]
    dist.all_gather(outs, x)
    dist.all_reduce(x)
    return [o.item() for o in outs], x.item()


@case
def stacked_all_gather(ctx):
    out = torch.empty(ctx.world_size, 2)
    dist.all_gather_into_tensor(out, torch.tensor([ctx.rank, 10.0 * ctx.rank]))
    flat = torch.empty(2 * ctx.world_size)
    dist.all_gather_into_tensor(flat, torch.tensor([ctx.rank, 10.0 * ctx.rank]))
    return out.tolist(), flat.tolist()


@case
def fp8(ctx, dtype_name, op_name):
    dtype = getattr(torch, dtype_name)
    t = torch.tensor([1.0, 2.0, -0.5]).to(dtype)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op_name))
    return str(t.dtype), t.float().tolist()


@case
def fp8_infinities(ctx, op_name):
    """Rank 0 holds +inf, rank 1 -inf, rank 2 +inf in the first slot (e5m2)."""
    first = [float("inf"), float("-inf"), float("inf")][ctx.rank]
    t = torch.tensor([first, 1.0]).to(torch.float8_e5m2)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op_name))
    return t.float().tolist()


@case
def fp8_two_rank_sum(ctx):
    t = torch.tensor([[float("inf"), float("inf")], [float("-inf"), -57344.0]][ctx.rank]).to(torch.float8_e5m2)
    dist.all_reduce(t)
    return t.float().tolist()


@case
def fp8_avg_infinity(ctx):
    t = torch.tensor([[float("-inf"), 14336.0][ctx.rank]]).to(torch.float8_e5m2)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t.float().tolist()


@case
def float_avg_and_premul(ctx):
    t = torch.tensor([1.0, 2.0]) * (ctx.rank + 1)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    p = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    dist.all_reduce(p, op=dist._make_nccl_premul_sum(0.5))
    q = torch.tensor([1.0, 2.0], dtype=torch.float64)
    dist.all_reduce(q, op=dist._make_nccl_premul_sum(torch.tensor([3.0], dtype=torch.float64)))
    c = torch.tensor([1 + 2j, 3 - 1j]) * (ctx.rank + 1)
    dist.all_reduce(c)
    return t.tolist(), p.float().tolist(), q.tolist(), [c[0].item(), c[1].item()]


@case
def nan_min_max(ctx):
    nan = float("nan")
    x = torch.tensor([nan, nan if ctx.rank == 0 else ctx.rank, float(ctx.rank)])
    out = {}
    for name in ("MAX", "MIN"):
        t = x.clone()
        dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
        out[name] = t.tolist()
    rs = torch.empty(3, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(rs, x.to(torch.bfloat16).repeat(ctx.world_size), op=dist.ReduceOp.MAX)
    out["reduce_scatter_tensor"] = rs.float().tolist()
    return out


@case
def in_place_tensor_collectives(ctx):
    n, r = ctx.world_size, ctx.rank
    gathered = torch.zeros(n * 2)
    gathered[2 * r: 2 * r + 2] = torch.tensor([r, 10.0 * r])
    dist.all_gather_into_tensor(gathered, gathered[2 * r: 2 * r + 2])  # input is the output's own slot
    ints = torch.arange(2 * n, dtype=torch.int32) * (r + 1)
    dist.reduce_scatter_tensor(ints[2 * r: 2 * r + 2], ints, op=dist.ReduceOp.AVG)
    return gathered.tolist(), ints[2 * r: 2 * r + 2].tolist()


@case
def reduce_scatters(ctx):
    n = ctx.world_size
    ins = [torch.full((j + 1,), float(ctx.rank + 1)) for j in range(n)]  # uneven slots
    out = torch.empty(ctx.rank + 1)
    dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX)
    inp = torch.arange(2.0 * n) * (ctx.rank + 1)
    before = inp.clone()
    rs = torch.empty(2, dtype=torch.float32)
    dist.reduce_scatter_tensor(rs, inp, op=dist.ReduceOp.SUM)
    ints = torch.arange(2 * n, dtype=torch.int32) * (ctx.rank + 1) - 5
    ri = torch.empty(2, dtype=torch.int32)
    dist.reduce_scatter_tensor(ri, ints, op=dist.ReduceOp.AVG)
    return out.tolist(), rs.tolist(), ri.tolist(), torch.equal(inp, before)


@case
def all_to_alls(ctx):
    n, r = ctx.world_size, ctx.rank
    ins = [torch.full((r + j + 1,), float(10 * r + j)) for j in range(n)]
    outs = [torch.empty(i + r + 1) for i in range(n)]
    dist.all_to_all(outs, ins)
    in_splits = [r + j + 1 for j in range(n)]
    out_splits = [i + r + 1 for i in range(n)]
    single_in = torch.cat([torch.full((s, 2), float(10 * r + j)) for j, s in enumerate(in_splits)])
    single_out = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(single_out, single_in, out_splits, in_splits)
    eq_out = torch.empty(n, dtype=torch.int64)
    dist.all_to_all_single(eq_out, torch.arange(n, dtype=torch.int64) + 100 * r)
    return [o.tolist() for o in outs], single_out[:, 0].tolist(), eq_out.tolist()


@case
def rooted(ctx):
    n, r = ctx.world_size, ctx.rank
    b = torch.full((2,), float(r))
    dist.broadcast(b, src=n - 1)
    g = torch.tensor([r, r], dtype=torch.float8_e5m2)
    gl = [torch.empty(2, dtype=torch.float8_e5m2) for _ in range(n)] if r == 0 else None
    dist.gather(g, gl, dst=0)
    s = torch.empty(3, dtype=torch.int8)
    sl = [torch.full((3,), j * 3, dtype=torch.int8) for j in range(n)] if r == 1 else None
    dist.scatter(s, sl, src=1)
    dist.barrier()
    return b.tolist(), [x.float().tolist() for x in gl] if gl else None, s.tolist()


@case
def point_to_point(ctx):
    n, r = ctx.world_size, ctx.rank
    peer = (r + 1) % n
    prev = (r - 1) % n
    src = torch.arange(6.0).reshape(2, 3).t() + 100 * r  # non-contiguous: NCCL only warns
    dst = torch.empty(2, 3).t()
    ops = [dist.P2POp(dist.isend, src, peer), dist.P2POp(dist.irecv, dst, prev)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    got = dst.tolist()
    if r == 0:
        dist.send(torch.tensor([1, 2, 3], dtype=torch.float8_e4m3fn), 1)
        other = None
    elif r == 1:
        buf = torch.empty(3, dtype=torch.float8_e4m3fn)
        dist.recv(buf, 0)
        other = buf.float().tolist()
    else:
        other = None
    return got, other


@case
def tagged_messages(ctx, batched):
    """Rank 0 sends three messages to rank 1 (tags 5, 6, 7), rank 1 posts its receives for tags 7, 5, 6;
    rank 0 also sends itself two (tags 1, 2) and receives them as tags 2, 1."""
    works, got, own = [], [torch.zeros(1) for _ in range(3)], [torch.zeros(1) for _ in range(2)]
    if ctx.rank == 0:
        ops = [(dist.isend, torch.tensor([float(tag)]), 1, tag) for tag in (5, 6, 7)]
        ops += [(dist.isend, torch.tensor([float(tag)]), 0, tag) for tag in (1, 2)]
        ops += [(dist.irecv, own[0], 0, 2), (dist.irecv, own[1], 0, 1)]
    else:
        ops = [(dist.irecv, got[i], 0, tag) for i, tag in enumerate((7, 5, 6))]
    if batched:
        works = dist.batch_isend_irecv([dist.P2POp(fn, t, peer, tag=tag) for fn, t, peer, tag in ops])
    else:
        works = [fn(t, peer, tag=tag) for fn, t, peer, tag in ops]
    for work in works:
        work.wait()
    return [t.item() for t in (own if ctx.rank == 0 else got)]


@case
def p2p_ring(ctx, order):
    """A ring of isend(next) / irecv(prev): "naive" (every rank sends first), "paired" (odd ranks
    receive first), or "batch" (naive order inside batch_isend_irecv)."""
    from simgpu import strict

    strict.set_timeout(5.0)
    try:
        n, r = ctx.world_size, ctx.rank
        send, got = torch.tensor([float(r)]), torch.zeros(1)
        ops = [(dist.isend, send, (r + 1) % n), (dist.irecv, got, (r - 1) % n)]
        if order == "paired" and r % 2:
            ops.reverse()
        if order == "batch":
            works = dist.batch_isend_irecv([dist.P2POp(*op) for op in ops])
        else:
            works = [fn(t, peer) for fn, t, peer in ops]
        for work in works:
            work.wait()
        return got.item()
    finally:
        strict.set_timeout(None)


@case
def p2p_first_send_then_collective(ctx):
    """Rank 0: isend(1), all_reduce, wait; rank 1: all_reduce, irecv(0). Fine on NCCL (its collectives do
    not block the host); the model must not turn rank 0's wait for rank 1 into a hang or an error."""
    dist.barrier()
    t = torch.ones(1)
    if ctx.rank == 0:
        work = dist.isend(torch.tensor([2.0]), 1)
        dist.all_reduce(t)
        work.wait()
        return t.item()
    dist.all_reduce(t)
    got = torch.zeros(1)
    dist.irecv(got, 0).wait()
    return t.item(), got.item()


@case
def p2p_ring_in_subgroup(ctx):
    """The naive ring in a subgroup of global ranks [0, 2, 3] of 4: messages name global ranks."""
    group = dist.new_group([0, 2, 3])
    if ctx.rank == 1:
        return None
    members = [0, 2, 3]
    me = members.index(ctx.rank)
    send, got = torch.ones(1), torch.zeros(1)
    works = [dist.isend(send, members[(me + 1) % 3], group=group), dist.irecv(got, members[(me - 1) % 3], group=group)]
    for work in works:
        work.wait()
    return got.item()


@case
def objects(ctx):
    n, r = ctx.world_size, ctx.rank
    objs = [{"from": 0, "x": [1, 2]}, None] if r == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    gathered = [None] * n
    dist.all_gather_object(gathered, ("rank", r))
    g = [None] * n if r == 0 else None
    dist.gather_object({"r": r}, g, dst=0)
    s = [None]
    dist.scatter_object_list(s, [f"to {j}" for j in range(n)] if r == 0 else None, src=0)
    return objs, gathered, g, s[0]


@case
def subgroup(ctx):
    group = ctx.group((0, 2))
    if ctx.rank == 1:
        return None
    t = torch.tensor([ctx.rank + 1.0])
    dist.all_reduce(t, group=group)
    return t.item()


@case
def mismatch_shapes(ctx):
    start = time.perf_counter()
    try:
        if ctx.rank == 0:
            dist.all_reduce(torch.zeros(3))  # site-a
        else:
            dist.all_reduce(torch.zeros(4))  # site-b
    except RuntimeError as exc:
        return f"{type(exc).__module__}.{type(exc).__name__}", str(exc), time.perf_counter() - start
    return None


@case
def mismatch_ops_then_ok(ctx):
    try:
        if ctx.rank == 0:
            dist.all_reduce(torch.zeros(2))
        else:
            dist.broadcast(torch.zeros(2), src=0)
    except RuntimeError as exc:
        first = (type(exc).__name__, str(exc))
    t = torch.ones(1)
    dist.all_reduce(t)  # the group is still in step after a mismatch
    return first, t.item()


@case
def async_issue_does_not_wait_for_peers(ctx, token):
    """Rank 1 issues its all_reduce only after rank 0's async call has returned: were the strict check
    done where the call is issued, rank 0 would wait there for rank 1, and both for ever (a timeout)."""
    store = dist.PrefixStore(f"issue-order/{token}", dist.distributed_c10d._get_default_store())
    t = torch.full((3,), float(ctx.rank + 1))
    if ctx.rank == 0:
        work = dist.all_reduce(t, async_op=True)
        store.set("rank0-issued", "1")
    else:
        store.wait(["rank0-issued"])
        work = dist.all_reduce(t, async_op=True)
    work.wait()
    return t.tolist()


@case
def async_mismatch_raises_at_wait(ctx):
    """An asynchronous call returns its work; the disagreement comes out of wait(), where NCCL hangs."""
    work = dist.all_reduce(torch.zeros(2 + ctx.rank), async_op=True)  # site-async
    try:
        work.wait()
    except RuntimeError as exc:
        return type(exc).__name__, str(exc)
    return None


@case
def destroy_right_after_issuing(ctx):
    """Rank 1 issues an all_reduce on a subgroup and destroys the group without waiting (funcol programs whose
    last all_reduce only rank 0 reads); rank 0 comes late and still gets the sum, as on NCCL."""
    group = dist.new_group([0, 1])
    t = torch.full((2,), float(ctx.rank + 1))
    if ctx.rank == 1:
        work = dist.all_reduce(t, group=group, async_op=True)
        dist.destroy_process_group(group)  # rank 0 has not issued yet: this waits for it, as NCCL's destroy does
        return work.is_completed(), t.tolist()
    time.sleep(1.0)
    dist.all_reduce(t, group=group)
    dist.destroy_process_group(group)
    return t.tolist()


@case
def one_rank_refuses(ctx):
    t = torch.zeros(3, 2).t() if ctx.rank == 1 else torch.zeros(2, 3)
    dist.all_reduce(t)


@case
def mismatch_splits(ctx):
    out_splits = [1, 1] if ctx.rank == 0 else [2, 1]
    dist.all_to_all_single(torch.empty(sum(out_splits)), torch.zeros(2), out_splits, [1, 1])


@case
def timeout(ctx, seconds):
    import simgpu.strict

    simgpu.strict.set_timeout(seconds)
    try:
        if ctx.rank == 1:
            return "skipped"
        dist.all_reduce(torch.zeros(2))
        return "no error"
    finally:
        simgpu.strict.set_timeout(None)


@case
def after_timeout(ctx):
    import simgpu.strict

    simgpu.strict.set_timeout(2.0)
    try:
        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [2.0, 2.0], t
    finally:
        simgpu.strict.set_timeout(None)


# ----------------------------------------------------------------------------- rejections
@pytest.mark.parametrize("dtype,name", [(torch.int16, "Short"), (torch.uint16, "UInt16"),
                                        (torch.uint32, "UInt32"), (torch.uint64, "UInt64")])
def test_rejects_dtypes_nccl_lacks(pool2, dtype, name):
    out = pool2.run(rank_call, "all_reduce", dtype, dist.ReduceOp.SUM)
    errors(out, "TypeError", rf"^Input tensor data type is not supported for NCCL process group: {name}\b")


@pytest.mark.parametrize("case", ["non_contiguous_all_reduce", "non_contiguous_all_to_all_single",
                                  "non_contiguous_gather"])
def test_rejects_non_contiguous_collective(pool2, case):
    errors(pool2.run(rank_call, case), "ValueError", r"^Tensors must be contiguous")


@pytest.mark.parametrize("op", ["BAND", "BOR", "BXOR"])
def test_rejects_bitwise_ops(pool2, op):
    out = pool2.run(rank_call, "all_reduce", torch.int32, getattr(dist.ReduceOp, op))
    errors(out, "ValueError", rf"^Cannot use ReduceOp\.{op} with NCCL")


def test_rejects_bool_avg_and_integer_premul(pool2):
    errors(pool2.run(rank_call, "all_reduce", torch.bool, dist.ReduceOp.AVG), "TypeError",
           r"Cannot use ReduceOp.AVG with boolean inputs")
    errors(pool2.run(rank_call, "premul_int"), "TypeError", r"PreMulSum Data type must be half, float")


def test_rejects_bad_tensor_collective_sizes(pool2):
    errors(pool2.run(rank_call, "rs_tensor_size"), "ValueError",
           r"input tensor must be the same size as output size times world size")
    errors(pool2.run(rank_call, "rs_tensor_dtype"), "TypeError",
           r"input tensor must be the same type as the output tensor")
    errors(pool2.run(rank_call, "ag_tensor_size"), "ValueError",
           r"output tensor size must be equal to world_size times input tensor size")


def test_rejects_recv_from_any_source(pool2):
    errors(pool2.run(rank_call, "recv_any"), "NotImplementedError", r"does not support recvAnysource")


# ----------------------------------------------------------------------------- NCCL arithmetic
def test_integer_avg_truncates_toward_zero_after_wrapping(pool2):
    assert values(pool2.run(rank_call, "int_avg", torch.int64, [[7, -7], [14, -14]])) == [[10, -10]] * 2
    # int8: 100 + 100 wraps to -56 and -100 + -100 to 56, then / 2; -101 / 2 truncates to -50
    assert values(pool2.run(rank_call, "int_avg", torch.int8, [[100, -100, -100], [100, -100, -1]])) \
        == [[-28, 28, -50]] * 2
    assert values(pool2.run(rank_call, "int_avg_async")) == [[10, -10]] * 2


def test_bool_sum_is_logical_or(pool2):
    for result in values(pool2.run(rank_call, "bool_ops")):
        assert result["SUM"] == ("torch.bool", [True, False, True, True])
        assert result["MAX"] == ("torch.bool", [True, False, True, True])
        assert result["PRODUCT"] == ("torch.bool", [False, False, False, True])
        assert result["MIN"] == ("torch.bool", [False, False, False, True])


def test_reduce_leaves_non_dst_unchanged(pool3):
    assert values(pool3.run(rank_call, "reduce_non_dst", "SUM")) == [[1.0] * 3, [6.0] * 3, [3.0] * 3]
    assert values(pool3.run(rank_call, "reduce_non_dst", "AVG")) == [[1.0] * 3, [2.0] * 3, [3.0] * 3]


@pytest.mark.parametrize("world,dtype,op,expected", [
    (2, "float8_e4m3fn", "SUM", [2.0, 4.0, -1.0]),
    (3, "float8_e5m2", "SUM", [3.0, 6.0, -1.5]),
    (2, "float8_e4m3fn", "MAX", [1.0, 2.0, -0.5]),
    (3, "float8_e4m3fn", "AVG", [1.0, 2.0, -0.5]),  # each x * fl8(1/3) = x * 0.34375, then summed
])
def test_fp8_reductions(pool2, pool3, world, dtype, op, expected):
    pool = pool2 if world == 2 else pool3
    got = values(pool.run(rank_call, "fp8", dtype, op))
    assert got == [(f"torch.{dtype}", expected)] * world


def test_fp8_infinities_count_as_the_largest_finite_value(pool3):
    """[nccl-run 2026-11-22] NCCL's e5m2 reduce reads +-inf as +-57344: inf - inf + inf is 57344, not NaN."""
    assert values(pool3.run(rank_call, "fp8_infinities", "SUM")) == [[57344.0, 3.0]] * 3
    assert values(pool3.run(rank_call, "fp8_infinities", "MIN")) == [[-57344.0, 1.0]] * 3
    # AVG is PREMUL_SUM(1/3): inf * fl8(1/3) is still inf and saturates after; 3 * 0.3125 rounds to 1.0
    assert values(pool3.run(rank_call, "fp8_infinities", "AVG")) == [[57344.0, 1.0]] * 3


def test_fp8_two_ranks_add_the_raw_values(pool2):
    """[nccl-probe run2] e5m2 on two ranks: inf + -inf is NaN, inf + -57344 saturates to 57344."""
    got = values(pool2.run(rank_call, "fp8_two_rank_sum"))
    assert str(got) == str([[float("nan"), 57344.0]] * 2)


def test_fp8_avg_scales_before_it_saturates(pool2):
    """[nccl-run x2 2026-11-22] e5m2 AVG of -inf and 14336: -57344 + 7168 rounds to -49152 (not -21504)."""
    assert values(pool2.run(rank_call, "fp8_avg_infinity")) == [[-49152.0]] * 2


def test_float_min_max_ignore_nan_unless_all_nan(pool3):
    for got in values(pool3.run(rank_call, "nan_min_max")):
        assert str(got["MAX"]) == "[nan, 2.0, 2.0]"
        assert str(got["MIN"]) == "[nan, 1.0, 0.0]"
        assert str(got["reduce_scatter_tensor"]) == "[nan, 2.0, 2.0]"


def test_float_avg_premul_and_complex(pool2):
    for t, p, q, c in values(pool2.run(rank_call, "float_avg_and_premul")):
        assert t == [1.5, 3.0]
        assert p == [1.0, 2.0]  # sum of 0.5 * x over 2 ranks
        assert q == [6.0, 12.0]  # tensor factor 3.0
        assert c == [3 + 6j, 9 - 3j]


# ----------------------------------------------------------------------------- data movement
def test_uneven_all_gather(pool3):
    expected = [[[0.0, 0.0]], [[1.0, 1.0]] * 2, [[2.0, 2.0]] * 3]
    assert values(pool3.run(rank_call, "uneven_all_gather")) == [expected] * 3
    got = values(pool3.run(rank_call, "even_all_gather_non_contiguous_outputs"))
    assert got[0] == [(torch.arange(4.0).reshape(2, 2) + 10 * j).tolist() for j in range(3)]


def test_one_element_tensor_with_stride_zero(pool2):
    assert values(pool2.run(rank_call, "one_element_stride_zero")) == [([1.0, 2.0], 3.0)] * 2


def test_all_gather_into_tensor_stacked_output(pool3):
    stacked = [[0.0, 0.0], [1.0, 10.0], [2.0, 20.0]]
    assert values(pool3.run(rank_call, "stacked_all_gather")) == [(stacked, sum(stacked, []))] * 3


def test_reduce_scatter_variants(pool3):
    got = values(pool3.run(rank_call, "reduce_scatters"))
    for r, (out, rs, ri, untouched) in enumerate(got):
        assert out == [3.0] * (r + 1)  # MAX over ranks of rank + 1
        assert rs == [6.0 * (2 * r), 6.0 * (2 * r + 1)]  # (1 + 2 + 3) * arange
        expected = [int((6 * (2 * r + k) - 15) / 3) for k in range(2)]  # trunc toward zero
        assert ri == expected
        assert untouched


def test_in_place_tensor_collectives(pool2):
    for r, (gathered, avg) in enumerate(values(pool2.run(rank_call, "in_place_tensor_collectives"))):
        assert gathered == [0.0, 0.0, 1.0, 10.0]
        assert avg == [int(3 * k / 2) for k in (2 * r, 2 * r + 1)]  # (1 + 2) * k / 2, truncated


def test_all_to_all_variants(pool3):
    for r, (outs, single, eq) in enumerate(values(pool3.run(rank_call, "all_to_alls"))):
        assert outs == [[float(10 * i + r)] * (i + r + 1) for i in range(3)]
        assert single == sum(([float(10 * i + r)] * (i + r + 1) for i in range(3)), [])
        assert eq == [r + 100 * i for i in range(3)]


def test_rooted_collectives_and_barrier(pool3):
    for r, (b, gl, s) in enumerate(values(pool3.run(rank_call, "rooted"))):
        assert b == [2.0, 2.0]
        assert gl == ([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]] if r == 0 else None)
        assert s == [3 * r] * 3


def test_point_to_point(pool3):
    got = values(pool3.run(rank_call, "point_to_point"))
    for r, (received, other) in enumerate(got):
        prev = (r - 1) % 3
        assert received == (torch.arange(6.0).reshape(2, 3).t() + 100 * prev).tolist()
    assert got[1][1] == [1.0, 2.0, 3.0]


def test_object_collectives(pool3):
    for r, (objs, gathered, g, s) in enumerate(values(pool3.run(rank_call, "objects"))):
        assert objs == [{"from": 0, "x": [1, 2]}, None]
        assert gathered == [("rank", j) for j in range(3)]
        assert g == ([{"r": j} for j in range(3)] if r == 0 else None)
        assert s == f"to {r}"


def test_subgroup(pool3):
    assert values(pool3.run(rank_call, "subgroup")) == [4.0, None, 4.0]


# ----------------------------------------------------------------------------- strict check
def _line_of(marker):
    lines = Path(__file__).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(f"# {marker}"))


def test_mismatch_raises_on_every_rank_with_a_table(pool2):
    for raised in values(pool2.run(rank_call, "mismatch_shapes")):
        assert raised is not None, "a rank did not raise"
        kind, message, _seconds = raised
        assert kind == STRICT_MISMATCH and "disagree at collective" in message, message
        assert "float32[3]" in message and "float32[4]" in message, message
        assert f"test_sim_backend.py:{_line_of('site-a')}" in message, message
        assert f"test_sim_backend.py:{_line_of('site-b')}" in message, message
        assert "'numel' differs" in message, message  # a mismatch at once, not a CollectiveTimeout after 30 s


def test_mismatched_ops_then_group_still_usable(pool2):
    for (kind, message), total in values(pool2.run(rank_call, "mismatch_ops_then_ok")):
        assert kind == "CollectiveMismatch"
        assert "different collectives" in message and "broadcast" in message
        assert total == 2.0


def test_a_rank_that_refuses_its_call_does_not_leave_the_others_waiting(pool3):
    out = pool3.run(rank_call, "one_rank_refuses")  # the others raise a mismatch, not a strict timeout
    assert out[1].error_type == "ValueError" and out[1].error.startswith("Tensors must be contiguous")
    for o in (out[0], out[2]):
        assert o.error_type == STRICT_MISMATCH, o.describe()
        assert "rank 1 refused its call before communicating: ValueError: Tensors must be contiguous" in o.error


def test_an_async_collective_is_issued_without_waiting_for_the_other_ranks(pool2):
    import uuid

    assert values(pool2.run(rank_call, "async_issue_does_not_wait_for_peers", uuid.uuid4().hex)) == [[3.0] * 3] * 2


def test_an_async_mismatch_is_raised_by_wait_on_every_rank(pool2):
    for kind, message in values(pool2.run(rank_call, "async_mismatch_raises_at_wait")):
        assert kind == "CollectiveMismatch" and "'numel' differs" in message, message
        assert f"test_sim_backend.py:{_line_of('site-async')}" in message, message


def test_destroying_a_group_lets_its_issued_collectives_finish(pool2):
    assert values(pool2.run(rank_call, "destroy_right_after_issuing")) == [[3.0, 3.0], (True, [3.0, 3.0])]


def test_mismatched_split_sizes(pool2):
    errors(pool2.run(rank_call, "mismatch_splits"), STRICT_MISMATCH,
           r"rank 0 sends 1 element\(s\) to rank 1, which expects 2 element\(s\) from rank 0")


def test_missing_rank_times_out():
    with RankPool(2, Binding("sim"), timeout=30.0) as pool:
        first = pool.run(rank_call, "timeout", 1.0)  # the 1 s strict deadline, not the 30 s call timeout
        assert first[1].ok and first[1].value == "skipped"
        assert not first[0].ok and first[0].error_type == STRICT_TIMEOUT, first[0].describe()
        assert "rank(s) [1] did not arrive, rank(s) [0] did" in first[0].error
        assert "rank 1: MISSING" in first[0].error
        # The group is now out of step, as NCCL's is after a watchdog timeout; the error says so
        # (poisons_process_group), and the pool replaces its ranks: the next call runs on a fresh group.
        assert first[0].poisoned
        assert pool.starts == 1
        pids = pool.pids()
        second = pool.run(rank_call, "after_timeout")
        assert all(o.ok for o in second), [o.describe() for o in second]
        assert pool.starts == 2 and not set(pids) & set(pool.pids())


@pytest.mark.parametrize("batched", [False, True])
def test_p2p_ignores_tags_and_matches_in_posting_order(pool2, batched):
    """ProcessGroupNCCL ignores tags: the k-th receive from a peer gets the k-th send from it. gloo would
    hand the receive for tag 7 the message with tag 7; NCCL (and the simulator) hand it the first one."""
    assert values(pool2.run(rank_call, "tagged_messages", batched)) == [[1.0, 2.0], [5.0, 6.0, 7.0]]


@pytest.mark.parametrize("order", ["paired", "batch"])
def test_p2p_ring_orders_that_work_on_nccl(pool3, order):
    assert values(pool3.run(rank_call, "p2p_ring", order)) == [2.0, 0.0, 1.0]


def test_naive_p2p_ring_is_the_deadlock_nccl_hangs_in():
    """[nccl-run 2026-11-22] every rank's first call is isend(next): each pair's communicator waits for a
    rank that waits in turn. NCCL hangs; the simulator raises on every rank, naming the cycle."""
    with RankPool(3, Binding("sim"), timeout=60.0) as pool:
        outcomes = pool.run(rank_call, "p2p_ring", "naive")
        assert [o.error_type for o in outcomes] == ["simgpu.p2p_pairs.P2PDeadlock"] * 3, [o.describe() for o in outcomes]
        for o in outcomes:
            assert "rank 0 send(dst=1)" in o.error and "rank 2 send(dst=0)" in o.error, o.error
            assert "test_sim_backend.py" in o.error and "batch_isend_irecv" in o.error
        assert values(pool.run(rank_call, "p2p_ring", "paired")) == [2.0, 0.0, 1.0]  # fresh ranks work


def test_first_send_waiting_on_a_peer_in_a_collective_goes_on(pool2):
    assert values(pool2.run(rank_call, "p2p_first_send_then_collective")) == [2.0, (2.0, 2.0)]


def test_deadlock_names_global_ranks_of_a_subgroup():
    with RankPool(4, Binding("sim"), timeout=60.0) as pool:
        outcomes = pool.run(rank_call, "p2p_ring_in_subgroup")
        errors = {r: o.error for r, o in enumerate(outcomes) if not o.ok}
        assert sorted(errors) == [0, 2, 3], [o.describe() for o in outcomes]
        assert "rank 0 send(dst=2)" in errors[0] and "rank 3 send(dst=0)" in errors[0], errors[0]


def test_a_recreated_group_starts_with_no_pair_communicators():
    """Keys are scoped to one creation of the group: a group made again over the same store (same
    name) does not see the pairs of the last one (on NCCL it has new pair communicators)."""
    from simgpu.p2p_pairs import PairRendezvous

    store = dist.HashStore()
    first = [PairRendezvous(store, r) for r in (0, 1)]
    first[0]._mark_arrived(1)
    assert first[1]._arrived_from(0)
    again = [PairRendezvous(store, r) for r in (0, 1)]
    assert not again[1]._arrived_from(0)
    again[0]._mark_arrived(1)
    assert again[1]._arrived_from(0)


def test_a_send_record_whose_recv_is_posted_makes_no_cycle():
    """A rank descheduled between its send starting (the peer's recv posted) and clearing its "blocked"
    record must not make a cycle with a peer that now sends back: on 64 ranks over 2 loaded cores the
    stale record outlived the 0.1 s confirmation and raised a false P2PDeadlock. The record names the
    recv's key; once that key exists the edge is gone, whatever the time."""
    from simgpu.p2p_pairs import PairRendezvous

    store = dist.HashStore()
    ranks = [PairRendezvous(store, r) for r in (0, 1)]
    recv_of_0 = "simgpu/p2p-check/0->1/0/1/recv"
    recv_of_1 = "simgpu/p2p-check/1->0/0/1/recv"
    for me, peer, recv_key in ((0, 1, recv_of_0), (1, 0, recv_of_1)):
        key = ranks[me]._key("blocked", me)
        store.set(key, f"{peer}|send@{recv_key}|site.py:{me}")
    assert ranks[1]._cycle() is not None  # both sends wait for recvs nobody posted: the deadlock
    store.set(recv_of_0, "posted")        # rank 1 posted its recv from 0: rank 0's record is stale
    assert ranks[1]._cycle() is None and ranks[0]._cycle() is None

"""NCCL calibration probe: what ProcessGroupNCCL accepts/rejects per collective x group size, and values."""
import json, os, sys, traceback
import torch, torch.distributed as dist
import torch.multiprocessing as mp

OUT = os.environ.get("OUT", "/tmp")

def mk(dtype, layout, shape=(4, 3), start=1.0, dev="cuda"):
    n = shape[0] * shape[1]
    base = torch.arange(n, dtype=torch.float64) + start
    if layout == "contiguous":
        t = base.reshape(shape)
    elif layout == "transposed":
        t = base.reshape(shape[1], shape[0]).t()
    else:
        w = torch.zeros(shape[0], 2 * shape[1], dtype=torch.float64); w[:, ::2] = base.reshape(shape); t = w[:, ::2]
    if dtype == torch.bool:
        c = (t.to(torch.int64) % 2).to(torch.bool)
    else:
        c = t.to(dtype) if not dtype.is_complex else t.to(torch.complex64)
    if layout == "contiguous":
        return c.to(dev)
    # rebuild with the same strides on device
    if layout == "transposed":
        return c.t().contiguous().to(dev).t()
    w = torch.zeros(shape[0], 2 * shape[1], dtype=dtype, device=dev) if dtype not in (torch.float8_e4m3fn, torch.float8_e5m2) else torch.zeros(shape[0], 2*shape[1], dtype=torch.uint8, device=dev).view(dtype)
    w[:, ::2] = c.to(dev); return w[:, ::2]

def op_of(name):
    if name == "premul":
        return dist._make_nccl_premul_sum(2.0)
    return getattr(dist.ReduceOp, name.upper())

def vals(t):
    if isinstance(t, (list, tuple)):
        return [vals(x) for x in t]
    x = t.detach().cpu()
    if x.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.float16): x = x.float()
    if x.dtype.is_complex: x = torch.view_as_real(x)
    return x.reshape(-1).tolist()

def ref(dtype, layout, shape=(4, 3), start=1.0):
    return mk(torch.float64, layout, shape, start, dev="cpu")

def red(opname, xs, n):
    s = torch.stack(xs)
    if opname in ("sum", None): return s.sum(0)
    if opname == "premul": return 2 * s.sum(0)
    if opname == "avg": return s.sum(0) / n
    if opname == "max": return s.max(0).values
    if opname == "product": return s.prod(0)
    if opname in ("band", "bor", "bxor") and n == 1: return s[0]
    return None

def check(got, want, dtype):
    if want is None or dtype == torch.bool or dtype.is_complex: return "unchecked"
    g = got if isinstance(got, list) else [got]
    w = want if isinstance(want, list) else [want]
    for a, b in zip(g, w):
        a = a.detach().cpu().to(torch.float64).reshape(-1)
        b = b.to(dtype).to(torch.float64).reshape(-1)
        if not torch.equal(a, b): return "WRONG"
    return "RIGHT"

def run_coll(coll, g, n, me, dtype, layout, opname, async_op=False):
    op = op_of(opname) if opname else None
    kw = dict(group=g, async_op=async_op)
    root = dist.get_global_rank(g, 0) if g is not None else 0
    S = 100.0
    if coll == "all_reduce":
        t = mk(dtype, layout, start=1 + 12 * me); w = dist.all_reduce(t, op=op, **kw); r = t
        want = red(opname, [ref(dtype, layout, start=1 + 12 * j) for j in range(n)], n)
    elif coll == "reduce":
        t = mk(dtype, layout, start=1 + 12 * me); w = dist.reduce(t, dst=root, op=op, **kw); r = t
        want = red(opname, [ref(dtype, layout, start=1 + 12 * j) for j in range(n)], n) if me == 0 else None
    elif coll == "broadcast":
        t = mk(dtype, layout, start=1 + 12 * me); w = dist.broadcast(t, src=root, **kw); r = t; want = ref(dtype, layout)
    elif coll == "all_gather":
        t = mk(dtype, layout, start=1 + 12 * me); outs = [mk(dtype, layout, start=S) for _ in range(n)]
        w = dist.all_gather(outs, t, **kw); r = outs; want = [ref(dtype, layout, start=1 + 12 * j) for j in range(n)]
    elif coll == "all_gather_into_tensor":
        t = mk(dtype, layout, start=1 + 12 * me); out = mk(dtype, layout, shape=(4 * n, 3), start=S)
        w = dist.all_gather_into_tensor(out, t, **kw); r = out
        want = torch.cat([ref(dtype, layout, start=1 + 12 * j) for j in range(n)])
    elif coll == "reduce_scatter":
        ins = [mk(dtype, layout, start=1 + 12 * me) for _ in range(n)]; out = mk(dtype, layout, start=S)
        w = dist.reduce_scatter(out, ins, op=op, **kw); r = out
        want = red(opname, [ref(dtype, layout, start=1 + 12 * j) for j in range(n)], n)
    elif coll == "reduce_scatter_tensor":
        t = mk(dtype, layout, shape=(4 * n, 3), start=1 + 100 * me); out = mk(dtype, layout, start=S)
        w = dist.reduce_scatter_tensor(out, t, op=op, **kw); r = out
        want = red(opname, [ref(dtype, layout, (4 * n, 3), 1 + 100 * j)[4 * me:4 * me + 4] for j in range(n)], n)
    elif coll == "gather":
        t = mk(dtype, layout, start=1 + 12 * me); outs = [mk(dtype, layout, start=S) for _ in range(n)] if me == 0 else None
        w = dist.gather(t, outs, dst=root, **kw); r = outs
        want = [ref(dtype, layout, start=1 + 12 * j) for j in range(n)] if me == 0 else None
    elif coll == "scatter":
        t = mk(dtype, layout, start=S); ins = [mk(dtype, layout, start=1 + 20 * j) for j in range(n)] if me == 0 else None
        w = dist.scatter(t, ins, src=root, **kw); r = t; want = ref(dtype, layout, start=1 + 20 * me)
    elif coll == "all_to_all":
        ins = [mk(dtype, layout, start=1 + 100 * me + 20 * k) for k in range(n)]; outs = [mk(dtype, layout, start=S) for _ in range(n)]
        w = dist.all_to_all(outs, ins, **kw); r = outs; want = [ref(dtype, layout, start=1 + 100 * j + 20 * me) for j in range(n)]
    elif coll == "all_to_all_single":
        t = mk(dtype, layout, shape=(4 * n, 3), start=1 + 100 * me); out = mk(dtype, layout, shape=(4 * n, 3), start=S)
        w = dist.all_to_all_single(out, t, **kw); r = out
        want = torch.cat([ref(dtype, layout, (4 * n, 3), 1 + 100 * j)[4 * me:4 * me + 4] for j in range(n)])
    if async_op: w.wait()
    torch.cuda.synchronize()
    if r is None: return "root-only"
    return check(r, want, dtype) + " " + json.dumps(vals(r))[:120]

def attempt(fn):
    try:
        v = fn()
        return "ok " + json.dumps(v)[:300]
    except Exception as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"

COLLS = ["all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
         "reduce_scatter_tensor", "gather", "scatter", "all_to_all", "all_to_all_single"]
RED = {"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"}
F8 = [torch.float8_e4m3fn, torch.float8_e5m2]
BADDT = {"int16", "uint32"}
NCCLPATH = {"gather", "scatter", "all_to_all", "all_to_all_single"}
VARIANTS = [("float32", "contiguous", "sum"), ("int16", "contiguous", "sum"), ("uint32", "contiguous", "sum"),
            ("complex64", "contiguous", "sum"), ("float32", "transposed", "sum"), ("float32", "strided", "sum"),
            ("int16", "strided", "sum"), ("float32", "contiguous", "band"), ("bool", "contiguous", "avg"),
            ("int32", "contiguous", "premul"), ("float32", "contiguous", "premul"), ("float16", "contiguous", "premul"),
            ("float32", "transposed", "premul"), ("float32", "strided", "premul"), ("complex64", "contiguous", "max"),
            ("float8_e4m3fn", "contiguous", "premul"), ("int16", "transposed", "sum")]
F8AVG = [("float8_e4m3fn", "contiguous", "avg"), ("float8_e5m2", "contiguous", "avg")]

CLEAN = True
def matrix(tag, g, n, me, rec, variants):
    for coll in COLLS:
        seen = set()
        for dt, lay, opn in variants:
            key = (dt, lay, opn if coll in RED else None)
            if key in seen: continue
            if CLEAN and coll in NCCLPATH and (dt in BADDT or (dt == "complex64" and coll == "gather")): continue
            if not CLEAN and not (coll in NCCLPATH and (dt in BADDT or (dt == "complex64" and coll == "gather"))): continue
            seen.add(key)
            res = attempt(lambda: run_coll(coll, g, n, me, getattr(torch, dt), lay, opn if coll in RED else None))
            rec(tag, coll, dt, lay, key[2], res)

def p2p(tag, rank, rec, peer, variants):
    for dt, lay, _ in variants:
        d = getattr(torch, dt)
        def sr():
            t = mk(d, lay, start=1 + rank)
            o = mk(d, lay, start=100)
            if rank < peer: dist.send(t, peer); dist.recv(o, peer)
            else: dist.recv(o, peer); dist.send(t, peer)
            torch.cuda.synchronize(); return vals(o)
        rec(tag, "send_recv", dt, lay, None, attempt(sr))
        def ii():
            t = mk(d, lay, start=1 + rank); o = mk(d, lay, start=100)
            ws = [dist.isend(t, peer), dist.irecv(o, peer)]
            [w.wait() for w in ws]; torch.cuda.synchronize(); return vals(o)
        rec(tag, "isend_irecv", dt, lay, None, attempt(ii))
        def bb():
            t = mk(d, lay, start=1 + rank); o = mk(d, lay, start=100)
            ws = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, o, peer)])
            [w.wait() for w in ws]; torch.cuda.synchronize(); return vals(o)
        rec(tag, "batch_isend_irecv", dt, lay, None, attempt(bb))

def worker(rank, world):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", NCCL_NVLS_ENABLE="0",
                      TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    f = open(f"{OUT}/rank{rank}.jsonl", "w")
    def rec(*row):
        f.write(json.dumps(row) + "\n"); f.flush()
        if rank == 0: print(" | ".join(str(x) for x in row), flush=True)
    global CLEAN
    singles = [dist.new_group([r]) for r in range(world)]
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    tri = dist.new_group([0, 1, 2])
    me1 = singles[rank]
    pg = pairs[rank // 2]; me2 = rank % 2; peer = rank ^ 1
    def alive(tag, g, n, me):
        rec(tag, "ALIVE?", "float32", "contiguous", "sum", attempt(lambda: run_coll("all_reduce", g, n, me, torch.float32, "contiguous", "sum")))
    CLEAN = True
    matrix("n2", pg, 2, me2, rec, VARIANTS)
    matrix("n1", me1, 1, 0, rec, VARIANTS)
    # bf16/f16/f32 premul at sizes 1, 2, 3
    for tag, g, n, me in (("n1", me1, 1, 0), ("n2", pg, 2, me2)) + ((("n3", tri, 3, rank),) if rank < 3 else ()):
        for dt in ("bfloat16", "float16", "float32"):
            for a in (False, True):
                rec(tag, "premul_value", dt, "contiguous", f"async={a}", attempt(lambda: run_coll("all_reduce", g, n, me, getattr(torch, dt), "contiguous", "premul", a)))
    if rank < 3:
        ins = [[0.5, float("-inf"), 1000.0], [-0.0, 0.0, -8.4738285e37], [249.0, -5.877472e-39, 1.001358e-05]]
        for dt in ("bfloat16", "float32"):
            def go():
                x = torch.tensor(ins[rank]).to(getattr(torch, dt)).cuda()
                w = dist.all_reduce(x, op=dist._make_nccl_premul_sum(3.0), group=tri, async_op=True); w.wait()
                torch.cuda.synchronize(); return vals(x)
            rec("n3", "premul_repro", dt, "contiguous", "async", attempt(go))
    # a2a single explicit splits, size 1
    for async_op in (True, False):
        bad = 0
        for i in range(20):
            x = torch.full((1,), float("nan"), device="cuda"); y = torch.zeros(1, device="cuda")
            w = dist.all_to_all_single(y, x, [1], [1], group=me1, async_op=async_op)
            if async_op: w.wait()
            torch.cuda.synchronize()
            if not torch.isnan(y).all().item(): bad += 1
        rec("n1", "a2a_single_splits", "float32", "contiguous", f"async={async_op}", f"wrong {bad}/20")
    # fp8 saturation, size 2
    def fp8(coll, dt, opn, a, b):
        def go():
            x = torch.tensor([a if me2 == 0 else b], dtype=torch.float32).to(getattr(torch, dt)).cuda()
            if coll == "all_reduce":
                dist.all_reduce(x, op=op_of(opn), group=pg); r = x
            else:
                inp = torch.cat([x, x]); r = torch.empty(1, dtype=x.dtype, device="cuda")
                dist.reduce_scatter_tensor(r, inp, op=op_of(opn), group=pg)
            torch.cuda.synchronize(); return vals(r)
        rec("n2", f"fp8_{coll}", dt, f"{a},{b}", opn, attempt(go))
    for dt in ("float8_e5m2", "float8_e4m3fn", "float16"):
        for opn, a, b in (("sum", 40000.0, 40000.0), ("sum", float("inf"), 1.0), ("sum", float("-inf"), -32.0), ("min", -0.0, float("-inf")),
                          ("max", float("inf"), 1.0), ("sum", float("nan"), 1.0), ("max", float("nan"), 1.0), ("min", float("nan"), float("-inf")),
                          ("product", 300.0, 300.0), ("avg", float("inf"), 1.0), ("sum", float("inf"), float("-inf"))):
            fp8("all_reduce", dt, opn, a, b)
        fp8("reduce_scatter_tensor", dt, "sum", float("inf"), -80.0)
    p2p("n2", rank, rec, peer, [("float32", "contiguous", None), ("float32", "transposed", None), ("float32", "strided", None),
                              ("complex64", "contiguous", None), ("bool", "strided", None)])
    alive("n2", pg, 2, me2)
    # poison 1: p2p dtype TypeError
    p2p("n2", rank, rec, peer, [("int16", "contiguous", None)])
    alive("n2", pg, 2, me2)
    # poison 2: Unconvertible inside a grouped call
    CLEAN = False
    rec("n2", "gather", "int16", "contiguous", None, attempt(lambda: run_coll("gather", pg, 2, me2, torch.int16, "contiguous", None)))
    alive("n2", pg, 2, me2)
    alive("n1", me1, 1, 0)
    alive("n4", None, world, rank)
    matrix("n1", me1, 1, 0, rec, VARIANTS)
    matrix("n2", pg, 2, me2, rec, VARIANTS)
    CLEAN = True
    matrix("n1", me1, 1, 0, rec, F8AVG)
    alive("n1", me1, 1, 0)
    matrix("n2", pg, 2, me2, rec, F8AVG)
    matrix("n4", None, world, rank, rec, F8AVG)
    rec("done", "", "", "", "", "")
    f.close()
    dist.destroy_process_group()

if __name__ == "__main__":
    world = torch.cuda.device_count()
    print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", world, flush=True)
    mp.spawn(worker, args=(world,), nprocs=world)

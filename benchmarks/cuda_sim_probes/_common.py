"""Shared step runner for the CUDA-simulation probes (no simgpu import).

Each probe sets up one candidate way of presenting a "cuda:1" device on a host
without a GPU, then calls run_standard_steps(), which runs the same plain
PyTorch program (the kind of code a user script contains) step by step and
records OK or "ExceptionType: first line of message" for each step.
"""
import json
import os
import sys
import tempfile
import time
import traceback

import torch

STREAM = os.environ.get("PROBE_STREAM") == "1"
RESULTS = {}   # step name -> "OK" / "OK (detail)" / "Type: msg"
ORDER = []


def _fmt_exc(e):
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{type(e).__name__}: {first}"


def record(name, fn):
    """Run fn(); record OK (or OK + returned detail string) or the exception."""
    if name not in ORDER:
        ORDER.append(name)
    if STREAM:
        print(f"START {name}", flush=True)
    try:
        detail = fn()
        RESULTS[name] = "OK" if detail is None else f"OK ({detail})"
        if STREAM:
            print(f"DONE {name} |=| {RESULTS[name]}", flush=True)
        return True
    except BaseException as e:  # noqa: BLE001 - probes record everything
        if isinstance(e, KeyboardInterrupt):
            raise
        RESULTS[name] = _fmt_exc(e)
        if STREAM:
            print(f"DONE {name} |=| {RESULTS[name]}", flush=True)
        if os.environ.get("PROBE_TRACE"):
            traceback.print_exc()
        return False


def note(name, value):
    if name not in ORDER:
        ORDER.append(name)
    RESULTS[name] = str(value)


def dev_str(t):
    """What Python code sees as the tensor's device (may be overridden)."""
    try:
        return str(t.device)
    except BaseException as e:  # noqa: BLE001
        return _fmt_exc(e)


def is_cuda_str(t):
    try:
        return str(t.is_cuda)
    except BaseException as e:  # noqa: BLE001
        return _fmt_exc(e)


class State:
    pass


def run_standard_steps(ctx, device="cuda:1", mesh_device_type="cuda"):
    """ctx: a context-manager factory that activates the candidate (or None).

    The body is deliberately plain PyTorch user code.
    """
    import contextlib
    import torch.nn as nn
    import torch.distributed as dist

    S = State()
    S.hook_dev = None
    S.fn_bwd_dev = None
    enter = ctx if ctx is not None else contextlib.nullcontext

    # ---- (1) tensors + Linear on cuda:1, forward
    def step1():
        with enter():
            S.x = torch.randn(4, 8, device=device)
            S.lin = nn.Linear(8, 8, device=device)
            S.y = S.lin(S.x)
        return f"x.device={dev_str(S.x)}, y.device={dev_str(S.y)}"
    ok1 = record("1 cuda:1 tensor + Linear forward", step1)

    # ---- (2) backward with a tensor hook that creates a tensor, + custom Function
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(c, inp):
            return inp * 2

        @staticmethod
        def backward(c, g):
            like = torch.ones_like(g)
            S.fn_bwd_dev = f"ones_like(g)={dev_str(like)}, g={dev_str(g)}"
            S.fn_bwd_mode = _mode_stack_desc()
            return g * 2

    def hook(g):
        made = torch.ones_like(g) * 1.0
        try:
            made2 = dev_str(torch.empty(2, device=device))
        except BaseException as e:  # noqa: BLE001
            made2 = _fmt_exc(e)
        S.hook_dev = f"ones_like(g)={dev_str(made)}, empty(device='{device}')={made2}, g={dev_str(g)}"
        S.hook_mode = _mode_stack_desc()
        return g + made * 0

    def step2():
        with enter():
            h = S.lin(S.x)
            h.register_hook(hook)
            out = Twice.apply(h)
            loss = out.sum()
            loss.backward()
        S.grad_dev = f"{dev_str(S.lin.weight.grad)} / is_cuda={is_cuda_str(S.lin.weight.grad)}"
        return f"w.grad.device={dev_str(S.lin.weight.grad)}"
    ok2 = ok1 and record("2 backward + register_hook + custom Function", step2)
    if not ok1:
        note("2 backward + register_hook + custom Function", "skipped (step 1 failed)")

    # ---- (3) Adam (default: foreach when params look like cuda)
    def step3():
        with enter():
            S.opt = torch.optim.Adam(S.lin.parameters(), lr=1e-3)
            S.opt.step()
            S.opt.zero_grad()
        st = S.opt.state[S.lin.weight]
        return f"exp_avg.device={dev_str(st['exp_avg'])}, step.device={dev_str(st['step'])}"
    if ok2:
        record("3 Adam step (default foreach)", step3)
    else:
        note("3 Adam step (default foreach)", "skipped (step 2 failed)")

    # ---- (4) DTensor on a 1-rank gloo process group
    def init_pg():
        if not dist.is_initialized():
            fd, path = tempfile.mkstemp()
            os.close(fd)
            os.unlink(path)
            store = dist.FileStore(path, 1)
            dist.init_process_group("gloo", rank=0, world_size=1, store=store)

    def step4_set_device():
        with enter():
            torch.cuda.set_device(torch.device(device).index or 0)
        return f"current_device={torch.cuda.current_device()}"
    record(f"4_ torch.cuda.set_device({torch.device(device).index or 0})", step4_set_device)

    def step4a():
        init_pg()
        from torch.distributed.device_mesh import DeviceMesh
        with enter():
            S.mesh = DeviceMesh(mesh_device_type, [0])
        return f"mesh.device_type={S.mesh.device_type}"
    okm = record(f"4a DeviceMesh('{mesh_device_type}', [0]) on gloo", step4a)

    def step4b():
        from torch.distributed.tensor import distribute_tensor, Shard, Replicate
        with enter():
            a = torch.randn(8, 8, device=device, requires_grad=False)
            b = torch.randn(8, 8, device=device)
            da = distribute_tensor(a, S.mesh, [Shard(0)]).requires_grad_()
            db = distribute_tensor(b, S.mesh, [Replicate()])
            dc = da @ db
            dc.sum().backward()
        return f"local.device={dev_str(dc.to_local())}, dtensor.device={dev_str(dc)}, grad.local={dev_str(da.grad.to_local())}"
    if okm:
        record("4b distribute_tensor + matmul + backward", step4b)
    else:
        note("4b distribute_tensor + matmul + backward", "skipped (no mesh)")

    # ---- (5) FSDP2
    def step5a():
        from torch.distributed.fsdp import fully_shard
        with enter():
            S.fmodel = nn.Sequential(nn.Linear(8, 16, device=device), nn.ReLU(), nn.Linear(16, 8, device=device))
            fully_shard(S.fmodel[0], mesh=S.mesh)
            fully_shard(S.fmodel, mesh=S.mesh)
        return f"param.device={dev_str(next(S.fmodel.parameters()))}"

    def step5b():
        with enter():
            inp = torch.randn(4, 8, device=device)
            out = S.fmodel(inp)
            out.sum().backward()
        g = next(S.fmodel.parameters()).grad
        return f"out.device={dev_str(out)}, grad.device={dev_str(g)}"
    if okm:
        if record("5a FSDP2 fully_shard init", step5a):
            record("5b FSDP2 forward+backward", step5b)
        else:
            note("5b FSDP2 forward+backward", "skipped (init failed)")
    else:
        note("5a FSDP2 fully_shard init", "skipped (no mesh)")
        note("5b FSDP2 forward+backward", "skipped (no mesh)")

    # ---- (6) reports
    if ok1:
        note("6a x.device", dev_str(S.x))
        note("6b x.is_cuda", is_cuda_str(S.x))
        note("6c Linear.weight.grad.device / is_cuda (made by autograd engine)",
             getattr(S, "grad_dev", "n/a"))
        note("6d tensors made in register_hook", S.hook_dev)
        note("6e tensors made in custom Function.backward", S.fn_bwd_dev)
        note("6f mode stack inside hook / Function.backward",
             f"{getattr(S, 'hook_mode', None)} / {getattr(S, 'fn_bwd_mode', None)}")
        if hasattr(S, "opt") and S.opt.state:
            st = S.opt.state[S.lin.weight]
            note("6g Adam state exp_avg.device / is_cuda",
                 f"{dev_str(st['exp_avg'])} / {is_cuda_str(st['exp_avg'])}")
    return S


def _mode_stack_desc():
    parts = []
    try:
        from torch.overrides import _get_current_function_mode_stack
        fm = [type(m).__name__ for m in _get_current_function_mode_stack()]
        parts.append(f"fn_modes={fm}")
    except Exception as e:  # noqa: BLE001
        parts.append(f"fn_modes=? {_fmt_exc(e)}")
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        dm = [type(m).__name__ for m in _get_current_dispatch_mode_stack()]
        parts.append(f"dispatch_modes={dm}")
    except Exception as e:  # noqa: BLE001
        parts.append(f"dispatch_modes=? {_fmt_exc(e)}")
    return ", ".join(parts)


def time_ratio(ctx, device="cuda:1", n_add=1000, n_mm=5, size=512):
    """(7) per-op overhead: candidate vs plain CPU tensors, same process."""
    import contextlib
    enter = ctx if ctx is not None else contextlib.nullcontext
    out = {}

    def bench(dev, use_ctx):
        cm = enter() if use_ctx else contextlib.nullcontext()
        with cm:
            a = torch.randn(16, device=dev)
            b = torch.randn(16, device=dev)
            for _ in range(50):
                a + b
            t0 = time.perf_counter()
            for _ in range(n_add):
                a + b
            t_add = time.perf_counter() - t0
            x = torch.randn(size, size, device=dev, requires_grad=True)
            w = torch.randn(size, size, device=dev, requires_grad=True)
            (x @ w).sum().backward()
            t0 = time.perf_counter()
            for _ in range(n_mm):
                (x @ w).sum().backward()
            t_mm = time.perf_counter() - t0
        return t_add, t_mm

    base = (float("inf"), float("inf"))
    cand = (float("inf"), float("inf"))
    for _ in range(3):  # interleave rounds, keep the min of each (shared machine)
        b = bench("cpu", False)
        base = (min(base[0], b[0]), min(base[1], b[1]))
        try:
            c = bench(device, True)
        except BaseException as e:  # noqa: BLE001
            note("7a 1000x a+b: us/op cpu -> candidate (ratio)", _fmt_exc(e))
            note(f"7b {size}x{size} matmul fwd+bwd: ms/iter cpu -> candidate (ratio)", "n/a")
            return
        cand = (min(cand[0], c[0]), min(cand[1], c[1]))
    out["add_us_per_op_cpu"] = base[0] / n_add * 1e6
    out["add_us_per_op_candidate"] = cand[0] / n_add * 1e6
    out["mm_ms_per_iter_cpu"] = base[1] / n_mm * 1e3
    out["mm_ms_per_iter_candidate"] = cand[1] / n_mm * 1e3
    note("7a 1000x a+b: us/op cpu -> candidate (ratio)",
         f"{out['add_us_per_op_cpu']:.1f} -> {out['add_us_per_op_candidate']:.1f} "
         f"(x{out['add_us_per_op_candidate'] / out['add_us_per_op_cpu']:.1f})")
    note(f"7b {size}x{size} matmul fwd+bwd: ms/iter cpu -> candidate (ratio)",
         f"{out['mm_ms_per_iter_cpu']:.1f} -> {out['mm_ms_per_iter_candidate']:.1f} "
         f"(x{out['mm_ms_per_iter_candidate'] / out['mm_ms_per_iter_cpu']:.2f})")


SHIM = os.environ.get("SIM_CUDA_SHIM") == "1"


def maybe_install_cuda_shim():
    """Optional, candidate-independent: a minimal Python-level torch.cuda shim.

    Enabled with SIM_CUDA_SHIM=1. It only replaces torch.cuda *Python* functions
    (lazy init, device count/current device, capability, streams/events mapped
    to torch.cpu's stand-ins); it does not touch tensors. It separates failures
    caused by the torch.cuda module from failures of the tensor mechanism.
    """
    note("shim", "torch.cuda Python shim ON" if SHIM else "no torch.cuda shim")
    if not SHIM:
        return
    import torch.cuda as tc
    cur = [0]
    tc._lazy_init = lambda: None
    tc.is_available = lambda: True
    tc.is_initialized = lambda: True
    tc.device_count = lambda: 2
    tc.current_device = lambda: cur[0]

    def set_device(d):
        cur[0] = d if isinstance(d, int) else (torch.device(d).index or 0)
    tc.set_device = set_device
    tc.get_device_capability = lambda device=None: (9, 0)
    tc.synchronize = lambda device=None: None
    tc.Stream = torch.cpu.Stream
    tc.Event = getattr(torch.cpu, "Event", tc.Event)
    tc.current_stream = lambda device=None: torch.cpu.current_stream()
    tc.default_stream = lambda device=None: torch.cpu.current_stream()
    tc.stream = torch.cpu.stream
    tc.memory_allocated = lambda device=None: 0


def finish(candidate):
    try:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    candidate = candidate + (" [+torch.cuda shim]" if SHIM else "")
    header = f"candidate {candidate} | torch {torch.__version__} | {sys.executable}"
    print(header)
    print("-" * len(header))
    for k in ORDER:
        print(f"{k:58s} | {RESULTS[k]}")
    print("JSON " + json.dumps({"candidate": candidate, "torch": torch.__version__,
                               "shim": SHIM, "results": {k: RESULTS[k] for k in ORDER}}))


def run_parts_in_subprocesses(script, parts, candidate):
    """Run each part of `script` in a child process (PROBE_PART=<part>), so a
    C++ abort (std::terminate) in one step is recorded instead of killing the
    probe. Merges the children's results into RESULTS and prints the table."""
    import subprocess
    for part in parts:
        env = dict(os.environ, PROBE_PART=part, PROBE_STREAM="1")
        p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True)
        started = None
        got = None
        for line in p.stdout.splitlines():
            if line.startswith("START "):
                started = line[6:]
            if line.startswith("JSON "):
                got = json.loads(line[5:])
        if got is not None:
            for k, v in got["results"].items():
                if k not in ORDER:
                    ORDER.append(k)
                RESULTS[k] = v
        else:
            what = [ln.strip() for ln in p.stderr.splitlines() if "what():" in ln]
            msg = what[0].replace("what():", "").strip() if what else (p.stderr.strip().splitlines() or ["?"])[-1]
            sig = f"signal {-p.returncode}" if p.returncode < 0 else f"rc {p.returncode}"
            # steps that completed before the crash were streamed? re-run is too slow; mark the crashing step
            name = started or part
            if name not in ORDER:
                ORDER.append(name)
            RESULTS[name] = f"PROCESS ABORTED ({sig}): {msg[:150]}"
            # collect streamed results of earlier steps in this part
            for line in p.stdout.splitlines():
                if line.startswith("DONE "):
                    k, v = line[5:].split(" |=| ", 1)
                    if k not in ORDER:
                        ORDER.insert(ORDER.index(name), k)
                    RESULTS[k] = v
    finish(candidate)

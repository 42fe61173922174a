"""A plan (`simgpu run --plan GPU --gpus N program`): the program runs on storage-less simulated GPUs,
and each rank writes what it would cost on that GPU: the caching allocator's peaks, and a step time.

Storage-less (docs/plan-mode.md says why this design and not FakeTensorMode): every tensor on a
simulated GPU is a meta tensor labelled with its GPU, made where the simulation would make host memory
(placement.backing). Ops run torch's meta kernels (shapes, dtypes, strides; no data, no arithmetic),
placement labels their results and the caching-allocator model (memory.py) charges their storages
exactly as in a simulated run with data, so the peaks are the same bytes. Collectives of meta tensors
pass the strict cross-rank check and move nothing (backend.py). Host tensors stay real.

Values a program reads back (`loss.item()`, `.tolist()`, `.cpu()`) are zeros of the right dtype and
shape: the same on every rank (no rank takes another branch than its peers), never uninitialised
memory. A program whose control flow depends on the values it computed follows the all-zero branch.

Step time: each op's FLOPs (torch.utils.flop_counter's formulas) and bytes (its tensors' sizes) priced
against the GPU (gpu_specs.py): max(FLOPs / matmul rate of its dtype, bytes / HBM bandwidth), views
free, attention and foreach kernels at their measured rates (plan_rates.py); each collective at the
cost model's GPU time for the GPU's machine preset. The ops run one after another on the GPU's compute
clock; a collective runs on its process group's own clock (NCCL's stream) from when it is issued and its
group's previous collective has ended, and holds compute back only where the program waits for it on the
default stream (a synchronous collective, `work.wait()`, `wait_tensor`): DDP's bucketed all-reduces and
FSDP's collectives on their own streams overlap compute, TP's all-reduces do not. A step is what lies
between two `optimizer.step()` returns and ends when the compute and every collective have; its time less
its compute (and the GPU's waits for the host) is the exposed communication. The host (plan_host.py):
the program's own host work, measured as it runs here and scaled to the reference box's CPU, drives a
host clock; an op or collective starts on the GPU no earlier than the host has issued it, `.item()` and
synchronize move the host to the GPU, and a step ends when both have. Not modelled: waits on events between streams (a side stream's
wait does not hold compute back) and, without --ranks, the time a rank waits for its peers (pipeline
bubbles: each rank has its own clocks; plan_roles.py joins them at point-to-point messages).

Each process writes $SIMGPU_PLAN_DIR/plan-<pid>.json at exit; the launcher reads them (summary_lines).
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import functools
import json
import os
import statistics
import threading
from pathlib import Path
from typing import Any, Sequence

import torch

from simgpu.cuda_sim import plan_host, plan_rates, tf32_kernels

ENV_GPU = "SIMGPU_PLAN"
ENV_DIR = "SIMGPU_PLAN_DIR"
ENV_TRACE = "SIMGPU_PLAN_TRACE"  # set: each rank keeps its ops and collectives for `--trace FILE`
ENV_RANKS = "SIMGPU_PLAN_RANKS"  # the ranks a plan of a sample runs (`--ranks`, plan_roles.py; _boot reads it too)
ENV_DISCOVER = "SIMGPU_PLAN_DISCOVER"  # `--ranks auto`'s first run: the file rank 0 writes its mesh to (plan_sample.py)
MAX_TRACE_EVENTS = 400_000  # per rank; later ones are counted, not kept
HOST_BOUND_SHARE = 0.3  # the summary says a step is host-bound where the GPU waits for the host longer than this share
MIN_KERNEL_US = 2.0  # the shortest a GPU kernel takes (launch to end), stated, not measured
_lock = threading.Lock()
_installed = False


def requested() -> str | None:
    """The GPU this process plans for, or None (no plan)."""
    return os.environ.get(ENV_GPU) or None


class Recorder:
    """This process's cost per step: ops' FLOPs, bytes and priced time, collectives' priced time."""

    def __init__(self, gpu_name: str):
        from simgpu import cost_model
        from simgpu.cuda_sim import gpu_specs

        self.gpu = gpu_specs.gpu(gpu_name)
        self.machine = cost_model.machine(self.gpu.comm_machine)
        self.steps: list[dict[str, float]] = []
        self.current = self._empty()
        self.unpriced: dict[str, int] = {}
        self.groups: set[int] = set()
        self.clock = 0.0  # us: when the compute stream is free
        self.host = 0.0  # us: when the host has issued what it has issued so far (plan_host)
        self.host_model = plan_host.uncalibrated()  # until the first step ends (plan_host.calibrate)
        self.probes = collections.deque((plan_host.speed_probe_us(repeats=1) for _ in range(3)),
                                        maxlen=plan_host.PROBE_WINDOW)  # this host's speed, sampled as it runs
        self.probe_us = statistics.median(self.probes)
        self.since_probe = 0.0
        self.calibrated = False
        self._calibrating = False
        self.step_start = 0.0
        self.comm_clock: dict[int, float] = {}  # group -> when its NCCL stream is free
        self.group_names: dict[int, str] = {}  # group -> its trace track
        self.trace = bool(os.environ.get(ENV_TRACE))
        self.events: list[list] = []  # [track, name, start us, duration us] when tracing
        self.events_dropped = 0

    @staticmethod
    def _empty() -> dict[str, float]:
        return {"ops": 0, "flops": 0, "bytes": 0, "compute_us": 0.0, "collectives": 0, "p2p": 0, "comm_bytes": 0,
                "comm_us": 0.0, "exposed_wait_us": 0.0, "host_idle_us": 0.0, "program_cpu_us": 0.0, "torch_calls": 0,
                "dispatches": 0}

    def _issue(self, launch_us: float) -> float:
        """The host issues one more op or collective: its clock moves by the program's own CPU since the
        last one (scaled to the box's CPU) and the launch; returns when the GPU may start it. Under _lock."""
        taken = plan_host.take()
        self.since_probe += taken.program_us
        if self.since_probe >= plan_host.PROBE_EVERY_US:  # sample the host's speed among the program's work
            self.probes.append(plan_host.speed_probe_us(repeats=1))
            self.probe_us = statistics.median(self.probes)
            self.since_probe = 0.0
            plan_host.take()  # the sample's time is not the program's
        c = self.current
        c["program_cpu_us"] += taken.program_us
        c["torch_calls"] += taken.calls
        c["dispatches"] += taken.entries
        self.host += self.host_model.box_us(taken, self.probe_us) + launch_us
        return self.host

    def _calibrate(self) -> None:
        """The host model of this process (plan_host.calibrate), once, outside the program's step figures."""
        from simgpu.cuda_sim import devices

        self.calibrated = True
        if not plan_host.measuring():  # a Recorder outside a plan (tests): nothing to calibrate against
            return
        probe = torch.empty(4, 4, device=torch.device("cuda", devices.current() if devices.initialized() else 0))
        self.host_model = plan_host.calibrate(probe)
        del probe

    def host_waits(self, streams: str = "compute") -> None:
        """The host blocks until the GPU is done (`.item()`: the compute stream; a synchronize: every stream)."""
        with _lock:
            self._issue(0.0)
            done = self.clock if streams == "compute" else max(self.clock, *self.comm_clock.values(), 0.0)
            self.host = max(self.host, done)

    def _event(self, track: str, name: str, start: float, duration: float) -> None:
        if len(self.events) < MAX_TRACE_EVENTS:
            begin = round(start, 3)  # ns resolution; the end rounded alike, so a track's events never overlap
            self.events.append([track, name, begin, round(round(start + duration, 3) - begin, 3)])
        else:
            self.events_dropped += 1

    def op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Price one aten op that ran on a simulated GPU."""
        if self._calibrating:
            return
        with _lock:
            host = self._issue(plan_host.LAUNCH_US)
        if getattr(func, "is_view", False) or plan_rates.packet(func) in _FREE or _capturing():
            return  # a CUDA graph's capture runs no kernel: its replays do
        flops = _flops(func, args, kwargs, out)
        moved = _bytes(args, kwargs) + _bytes((out,), {})
        dtype = _compute_dtype(args)
        seconds = plan_rates.seconds(func, args, kwargs, flops, moved, self.gpu, dtype)  # attention, foreach
        if seconds is None:
            seconds = max(flops / self.gpu.matmul_rate(dtype) if flops else 0.0, moved / self.gpu.bandwidth)
        us = max(seconds * 1e6, MIN_KERNEL_US)
        with _lock:
            c = self.current
            c["ops"] += 1
            c["flops"] += flops
            c["bytes"] += moved
            c["compute_us"] += us
            if host > self.clock:  # the GPU has run all it was given: it waits for the host
                c["host_idle_us"] += host - self.clock
                if self.trace:
                    self._event(_stream_track(), "idle: waiting for the host", self.clock, host - self.clock)
                self.clock = host
            if self.trace:
                self._event(_stream_track(), plan_rates.packet(func).__name__, self.clock, us)
            self.clock += us

    def collective(self, op: str, n: int, args: Sequence[Any], group: int = 0) -> float | None:
        """Price a collective issued now on `group`; returns when it ends (us), None if not priced."""
        from simgpu import collective_facts, comm_log, cost_model

        if _capturing():
            return None  # a CUDA graph's capture runs nothing: its replays issue the collective (graphs.py)
        if n > 1 and op not in ("send", "recv"):
            self.groups.add(group)  # NCCL makes a group's communicator (and its buffers) at its first collective

        try:
            nbytes = comm_log.nccl_tests_bytes(op, n, args)
        except Exception:  # noqa: BLE001 - an odd argument: counted, not priced
            with _lock:
                self.unpriced[op] = self.unpriced.get(op, 0) + 1
            return None
        name = collective_facts.ALIASES.get(op, op)
        us = cost_model.predict(self.machine, name, nbytes, 2 if op in ("send", "recv") else n).gpu_us
        with _lock:
            host = self._issue(plan_host.COLLECTIVE_LAUNCH_US)
            c = self.current
            c["p2p" if op in ("send", "recv") else "collectives"] += 1
            c["comm_bytes"] += nbytes
            c["comm_us"] += us
            start = max(self.clock, host, self.comm_clock.get(group, 0.0))
            self.comm_clock[group] = end = start + us
            if self.trace:
                track = self.group_names.setdefault(group, f"nccl: group {len(self.group_names)} of {n}")
                self._event(track, f"{op} {nbytes} B", start, us)
        return end

    def waited(self, end: float) -> None:
        """The program waits for a collective that ends at `end`: on the default stream, compute waits."""
        from simgpu.cuda_sim import devices

        if devices.initialized() and devices.stream_key(devices.current()) != 0:
            return  # a side stream waits (FSDP's): the compute stream goes on until it waits on an event
        with _lock:
            if end > self.clock:
                self.current["exposed_wait_us"] += end - self.clock
                if self.trace:
                    self._event(_COMPUTE_TRACK, "wait for collective", self.clock, end - self.clock)
                self.clock = end

    def step(self) -> None:
        """An optimizer step returned: what was recorded since the last one is one training step."""
        with _lock:
            self._issue(0.0)
            gpu_end = max(self.clock, *self.comm_clock.values()) if self.comm_clock else self.clock
            end = max(gpu_end, self.host)
            c = self.current
            c["gpu_step_us"] = gpu_end - self.step_start  # the GPU's timeline, its waits for the host included
            c["host_us"] = self.host - self.step_start  # the host's time to issue the step
            c["step_us"] = end - self.step_start
            c["probe_us"] = self.probe_us
            c["exposed_comm_us"] = max(c["gpu_step_us"] - c["compute_us"] - c["host_idle_us"], 0.0)
            if self.trace:
                self._event("steps", f"step {len(self.steps)}", self.step_start, c["step_us"])
            self.steps.append(c)
            self.current = self._empty()
            self.clock = self.host = self.step_start = end
            if not self.calibrated:
                self._calibrating = True
                try:
                    self._calibrate()
                finally:
                    self._calibrating = False
            plan_host.take()  # the calibration is not the program's

    def document(self) -> dict:
        from simgpu.cuda_sim import devices

        memory = {}
        for i, m in enumerate(devices.table().memory):
            if m.peak_reserved:
                memory[str(i)] = {"max_allocated": m.peak_allocated, "max_reserved": m.peak_reserved,
                                  "capacity": m.capacity}
        return {"pid": os.getpid(), "rank": _rank(), "world_size": _world(), "gpu": self.gpu.name,
                "steps": self.steps, "after_last_step": self.current, "memory": memory, "unpriced": self.unpriced,
                "communicators": len(self.groups), "host_model": dataclasses.asdict(self.host_model),
                **_sampled_groups(),
                **({"events": self.events, "events_dropped": self.events_dropped} if self.trace else {})}


_COMPUTE_TRACK = "stream 0 (compute)"


def _capturing() -> bool:
    from simgpu.cuda_sim import graphs

    return graphs.is_current_stream_capturing()


def _sampled_groups() -> dict:
    """Under --ranks: this process's groups and their collective sequences (plan_roles.check compares them)."""
    from simgpu.cuda_sim import plan_roles

    return {"groups": plan_roles.document()} if plan_roles.active() else {}


def _stream_track() -> str:
    """The trace track of the current stream of the current simulated GPU."""
    from simgpu.cuda_sim import devices

    key = devices.stream_key(devices.current()) if devices.initialized() else 0
    return _COMPUTE_TRACK if key == 0 else f"stream {key:#x}"


RECORDER: Recorder | None = None

_aten = torch.ops.aten
# Ops that move no data on a GPU: metadata, allocation without initialisation, stream bookkeeping.
_FREE = {_aten.empty, _aten.empty_like, _aten.empty_strided, _aten.record_stream, _aten.set_,
         _aten._local_scalar_dense, _aten.resize_, _aten.lift_fresh}


def _flops(func: Any, args: tuple, kwargs: dict, out: Any) -> int:
    from torch.utils.flop_counter import flop_registry

    formula = flop_registry.get(plan_rates.packet(func))
    if formula is None:
        return 0
    try:
        return int(formula(*args, **kwargs, out_val=out))
    except Exception:  # noqa: BLE001 - a formula that cannot read these arguments: bytes only
        return 0


def _bytes(args: Sequence[Any], kwargs: dict) -> int:
    total = 0
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, (list, tuple)):
            total += sum(v.numel() * v.element_size() for v in value if isinstance(v, torch.Tensor))
    return total


_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8"}


def _compute_dtype(args: Sequence[Any]) -> str:
    for value in args:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            name = _DTYPE_NAMES.get(value.dtype)
            if name is not None:
                return name
            if value.dtype == torch.float32 and tf32_kernels.enabled():  # legacy and new precision APIs alike
                return "tf32"
            return "fp32"
    return "fp32"


def _rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            return dist.get_rank()
    except Exception:  # noqa: BLE001
        pass
    return int(os.environ.get("RANK", "-1"))


def _world() -> int:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            return dist.get_world_size()
    except Exception:  # noqa: BLE001
        pass
    return int(os.environ.get("WORLD_SIZE", "-1"))


def flush() -> None:
    """Write this process's plan to $SIMGPU_PLAN_DIR/plan-<pid>.json (replacing the last write)."""
    folder = os.environ.get(ENV_DIR)
    if RECORDER is None or not folder:
        return
    from simgpu.cuda_sim import devices

    if not any(m.peak_reserved for m in devices.table().memory) and not RECORDER.steps:
        return  # a process that never used a GPU (torchrun's agent): nothing to say
    path = Path(folder) / f"plan-{os.getpid()}.json"
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(RECORDER.document()))
        os.replace(tmp, path)
    except OSError:
        pass


def _read_zero(func: Any, args: tuple, kwargs: dict) -> Any:
    """`.item()` of a storage-less tensor: zero of its dtype (the same on every rank; module docstring)."""
    t = args[0]
    if t.is_meta:
        if RECORDER is not None:
            RECORDER.host_waits("compute")  # the host reads the value once the stream has made it
        return False if t.dtype == torch.bool else (0 if not (t.is_floating_point() or t.is_complex()) else 0.0)
    return func(*args, **kwargs)


def _equal_as_zeros(func: Any, args: tuple, kwargs: dict) -> Any:
    """`torch.equal` (no meta kernel: it reads values) where a tensor is storage-less: compared as the zeros a
    plan reads back from it, so that ranks agree and a program's own checks (TP's, Megatron's) pass alike."""
    if not any(isinstance(t, torch.Tensor) and t.is_meta for t in args):
        return func(*args, **kwargs)
    from simgpu.cuda_sim import placement

    if RECORDER is not None:
        RECORDER.host_waits("compute")
    with placement.suspended():
        return torch.equal(*(torch.zeros(t.shape, dtype=t.dtype) if t.is_meta else t.cpu() for t in args))


_FUNCTIONAL = ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_", "all_gather_into_tensor",
               "all_gather_into_tensor_coalesced", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced",
               "all_to_all_single", "broadcast", "broadcast_", "isend", "irecv", "batch_p2p_ops", "wait_tensor",
               "_wrap_tensor_autograd")


def _functional_collectives_run_for_real() -> None:
    """torch's functional collectives (`_c10d_functional`: DTensor's redistributions, TP's all-reduces)
    have Meta kernels that make an output and issue nothing; a plan, whose tensors are meta, would run
    those: no collective reached the process group (TP's were neither checked across ranks nor priced),
    and `wait_tensor` and `_wrap_tensor_autograd` (an AsyncCollectiveTensor around the same storage) each
    made a second buffer of the output's size (+512 MiB reserved under TP's vocabulary all-gather at
    step_reference's small size). A plan runs the kernels a GPU runs instead (CompositeExplicitAutograd:
    C++ that calls the process group), as a run with data does."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    import torch.distributed._functional_collectives  # noqa: F401 - defines the Python-side ops
    from simgpu.cuda_sim import placement

    key = torch._C.DispatchKey.CompositeExplicitAutograd
    for name in _FUNCTIONAL:
        packet = getattr(torch.ops._c10d_functional, name, None) if hasattr(torch.ops, "_c10d_functional") else None
        overload = getattr(packet, "default", None) if packet is not None else None
        if overload is None or placement.has_special(packet) or not torch._C._dispatch_has_kernel_for_dispatch_key(
                overload.name(), "CompositeExplicitAutograd"):
            continue
        placement.special(packet, functools.partial(_run_for_real, overload, key))


def _run_for_real(overload: Any, key: Any, run: Any, args: tuple, kwargs: dict) -> Any:
    """A functional collective's GPU kernel on storage-less tensors; what it makes goes on their GPU."""
    from simgpu.cuda_sim import placement

    out = overload._op_dk(key, *args, **kwargs)
    target = placement.gpu_of_call(args, kwargs)
    return out if target is None else placement.label(out, target)


def _optimizer_stepped() -> None:
    """A step ends where optimizer.step() returns; one captured in a CUDA graph ends at each replay (graphs.py)."""
    from simgpu.cuda_sim import graphs

    if not graphs.count_captured_step():
        RECORDER.step()


def install() -> None:
    """Make this process's simulated GPUs storage-less and record the plan (SIMGPU_PLAN names the GPU)."""
    global RECORDER, _installed
    gpu_name = requested()
    if gpu_name is None or _installed:
        return
    from simgpu.cuda_sim import placement

    plan_host.activate()
    RECORDER = Recorder(gpu_name)
    placement.make_storage_less(RECORDER.op)
    placement.special(_aten._local_scalar_dense, _read_zero)
    placement.special(_aten.equal, _equal_as_zeros)
    _functional_collectives_run_for_real()
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(lambda *_: _optimizer_stepped())
    if os.environ.get(ENV_DISCOVER):
        from simgpu.cuda_sim import plan_sample

        plan_sample.install_discovery(os.environ[ENV_DISCOVER])
    import torch.distributed.utils as dist_utils

    # DDP's parameter check across ranks sends the shapes as values in a GPU tensor, which a plan does not
    # hold: not run; the strict check still compares every bucket's all_reduce across ranks
    import torch.nn.parallel.distributed as ddp

    for module in (dist_utils, ddp):
        if hasattr(module, "_verify_param_shape_across_processes"):
            module._verify_param_shape_across_processes = lambda *args, **kwargs: None
    atexit.register(flush)
    from multiprocessing import util

    util.Finalize(None, flush, exitpriority=100)  # multiprocessing children leave through os._exit
    _installed = True


# ----------------------------------------------------------------------------- the launcher's side
def read_plans(folder: str | Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("plan-*.json"))]


def _median(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    return 0.0 if n == 0 else (values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2)


def summarize(plans: Sequence[dict]) -> list[dict]:
    """Per rank: peak memory (allocator + context + NCCL), and the median step's compute, exposed
    communication and time (the first step left out when there are several: it includes start-up work)."""
    from simgpu.cuda_sim import gpu_specs

    rows = []
    for plan in sorted(plans, key=lambda p: (p.get("rank", -1), p["pid"])):
        gpu = gpu_specs.gpu(plan["gpu"])
        steps = plan["steps"][1:] if len(plan["steps"]) > 1 else plan["steps"]
        compute = _median([s["compute_us"] for s in steps])
        comm = _median([s["comm_us"] for s in steps])
        step = _median([s.get("step_us", s["compute_us"] + s["comm_us"]) for s in steps])
        gpu_step = _median([s.get("gpu_step_us", s.get("step_us", s["compute_us"] + s["comm_us"])) for s in steps])
        host = _median([s.get("host_us", 0.0) for s in steps])
        idle = _median([s.get("host_idle_us", 0.0) for s in steps])
        exposed = _median([s.get("exposed_comm_us", max(s.get("gpu_step_us", 0.0) - s["compute_us"], 0.0)) for s in steps])
        for index, mem in sorted(plan["memory"].items()):
            rows.append({"rank": plan["rank"], "gpu_index": int(index), "steps": len(plan["steps"]),
                         "max_allocated": mem["max_allocated"], "max_reserved": mem["max_reserved"],
                         "device_total": mem["max_reserved"] + gpu.context_bytes
                         + gpu.nccl_bytes_per_comm * max(1, plan.get("communicators", 1)),
                         "compute_us": compute, "comm_us": comm, "step_us": step, "host_us": host,
                         "gpu_step_us": gpu_step, "host_idle_us": idle, "exposed_comm_us": exposed})
    return rows


def summary_lines(plans: Sequence[dict], gpu_name: str) -> list[str]:
    """The table `simgpu run --plan` prints at the end."""
    from simgpu.cuda_sim import gpu_specs

    gpu = gpu_specs.gpu(gpu_name)
    gib = float(1 << 30)
    lines = [f"simgpu plan for {gpu.description}: per GPU, peak memory (caching allocator model) and one step "
             f"(median over steps after the first; a step ends at optimizer.step())",
             f"{'rank':>4} {'gpu':>3} {'alloc GiB':>9} {'reserved':>9} {'+ctx+NCCL':>9} {'steps':>5} "
             f"{'compute ms':>10} {'comm ms':>8} {'exposed comm ms':>15} {'GPU waits host ms':>17} {'host ms':>8} "
             f"{'step ms':>8}"]
    rows = summarize(plans)
    for r in rows:
        lines.append(f"{r['rank']:>4} {r['gpu_index']:>3} {r['max_allocated'] / gib:>9.2f} {r['max_reserved'] / gib:>9.2f} "
                     f"{r['device_total'] / gib:>9.2f} {r['steps']:>5} {r['compute_us'] / 1e3:>10.2f} "
                     f"{r['comm_us'] / 1e3:>8.2f} {r['exposed_comm_us'] / 1e3:>15.2f} {r['host_idle_us'] / 1e3:>17.2f} "
                     f"{r['host_us'] / 1e3:>8.2f} "
                     f"{r['step_us'] / 1e3:>8.2f}")
    waiting = max(rows, key=lambda r: r["host_idle_us"] / max(r["step_us"], 1e-9), default=None)
    if waiting is not None and waiting["host_idle_us"] > HOST_BOUND_SHARE * waiting["step_us"]:
        who = f"rank {waiting['rank']}" if waiting["rank"] >= 0 else "the process"
        lines.append(f"host-bound: {who}'s GPU {waiting['gpu_index']} waits for the host "
                     f"{waiting['host_idle_us'] / waiting['step_us']:.0%} of its step, so the step time is mostly the "
                     f"host's speed, which varies between machines and runs more than the GPU's (docs/plan-mode.md: "
                     f"\"Where a real step's host time goes\"); SIMGPU_PLAN_HOST_PROBE_US plans for another host")
    classes = equal_ranks(plans)
    if len(plans) > 1:
        lines.append("ranks alike (the same ops, FLOPs, bytes and collectives every step, the same peaks): "
                     + "; ".join(_ranges(ranks) for ranks in classes))
    lines.append(f"(+ctx+NCCL adds the CUDA context, {gpu.context_bytes >> 20} MiB, and {gpu.nccl_bytes_per_comm >> 20} MiB "
                 f"of NCCL buffers per communicator the rank used, as measured on 4x H200; rates: "
                 f"{'measured, ' + gpu.source if gpu.calibrated else 'datasheet x derating, uncalibrated'}; "
                 f"communication: cost model preset {gpu.comm_machine}; collectives overlap compute until the "
                 f"default stream waits for them; host: the program's own host work, measured here and scaled to a "
                 f"host whose speed probe takes {plan_host.reference_probe_us():g} us (plan_host.py); the GPU starts an op "
                 f"once the host has issued it; pipeline bubbles and messages only under --ranks, where a message "
                 f"carries its sender's clock)")
    return lines


def sample_lines(plans: Sequence[dict], sample: Sequence[int]) -> tuple[list[str], bool]:
    """Under --ranks: which ranks ran, and whether every group's sampled members called the same
    collectives (plan_roles.check); (lines, agreed)."""
    from simgpu.cuda_sim import plan_roles

    ran = sorted({p["rank"] for p in plans})
    world = max((p.get("world_size", 0) for p in plans), default=0)
    lines = [f"simgpu plan --ranks: ran {len(ran)} of {world} ranks ({_ranges(ran)}); every other rank is taken to "
             f"be alike the sampled ranks of its role (the same program path on tensors of the same shapes)"]
    stray = sorted(set(ran) - set(sample))
    if stray:
        lines.append(f"simgpu plan --ranks: ranks {_ranges(stray)} ran though not in --ranks: the program does not "
                     f"start its ranks with torchrun (RANK in each worker's environment), which --ranks needs")
        return lines, False
    problems = plan_roles.check(plans)
    checked, trusted = plan_roles.coverage(plans)
    if problems:
        lines += [f"simgpu plan --ranks: the sample disagrees: {p}" for p in problems]
        return lines, False
    lines.append(f"simgpu plan --ranks: check passed: the sampled members of {checked} groups called the same "
                 f"collectives (ops, shapes, dtypes, values of tensors with data); {trusted} groups had one sampled "
                 f"member (taken on trust: add a second member of each to check them)")
    return lines, True


_STEP_KEYS = ("ops", "flops", "bytes", "collectives", "p2p", "comm_bytes")


def equal_ranks(plans: Sequence[dict]) -> list[list[int]]:
    """The ranks grouped by what they did: every step's op, FLOP, byte and collective counts and the
    allocator's peaks. Ranks of one group are alike as far as a plan can tell (the first step towards
    running one process per role)."""
    groups: dict[tuple, list[int]] = {}
    for plan in plans:
        steps = [*plan["steps"], plan["after_last_step"]]
        signature = (tuple(tuple(step.get(k, 0) for k in _STEP_KEYS) for step in steps),
                     tuple((m["max_allocated"], m["max_reserved"]) for _, m in sorted(plan["memory"].items())))
        groups.setdefault(signature, []).append(plan["rank"])
    return sorted(sorted(ranks) for ranks in groups.values())


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    parts: list[str] = []
    start = previous = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == previous + 1:
            previous = rank
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if rank is not None:
            start = previous = rank
    return ", ".join(parts)


def trace_document(plans: Sequence[dict]) -> dict:
    """The ranks' timelines as Chrome trace JSON (chrome://tracing, ui.perfetto.dev): a process per
    simulated GPU (its rank), a thread per stream or NCCL group, complete ("X") events in microseconds."""
    events: list[dict] = []
    for plan in sorted(plans, key=lambda p: (p.get("rank", -1), p["pid"])):
        pid = plan["rank"] if plan["rank"] >= 0 else plan["pid"]
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": f"rank {plan['rank']} ({plan['gpu']})"}})
        tracks: dict[str, int] = {}
        for track, name, start, duration in plan.get("events", ()):
            tid = tracks.get(track)
            if tid is None:
                tid = tracks[track] = len(tracks)
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}})
            events.append({"ph": "X", "name": name, "cat": track.split(" ")[0].rstrip(":"), "pid": pid, "tid": tid,
                           "ts": start, "dur": duration})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"simgpu": "plan timeline (docs/plan-mode.md)",
                          "events_dropped": sum(p.get("events_dropped", 0) for p in plans)}}


def write_trace(plans: Sequence[dict], path: str | Path) -> int:
    """Write trace_document(plans) to `path`; returns how many timed events it holds."""
    document = trace_document(plans)
    Path(path).write_text(json.dumps(document))
    return sum(1 for e in document["traceEvents"] if e["ph"] == "X")

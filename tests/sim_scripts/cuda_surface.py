"""The public CUDA surface, name by name: run on 2 GPUs, real (`--record FILE`) or simulated.

Every public name of torch.cuda and its submodules, torch.accelerator and torch.backends.cuda/cudnn
(simgpu.cuda_sim.surface enumerates them from the installed torch) is either refused with one line
naming it, or called here by a check that asserts CUDA's behaviour and returns a fingerprint (types,
shapes, values that do not depend on the machine). On real GPUs `--record FILE` writes the
fingerprints; under simulation `--reference FILE` compares with them, name by name. A simulated or
torch-own name without a check, or a name in neither list, fails this script.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import pickle
import sys
from typing import Any, Callable

import torch

CHECKS: dict[str, Callable[[], Any]] = {}


def check(*names: str) -> Callable:
    def register(fn: Callable) -> Callable:
        for name in names:
            CHECKS[name] = fn
        return fn
    return register


def kind(value: Any) -> str:
    return type(value).__name__


def optional(name: str, *args: Any, module: Any = None) -> Any:
    """Call a name that only some torch versions have; None where this one lacks it."""
    fn = getattr(module if module is not None else torch.cuda, name, None)
    return None if fn is None else fn(*args)


# ---- devices -------------------------------------------------------------------------------------
@check("torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.init", "torch.cuda.is_initialized")
def _devices() -> Any:
    torch.cuda.init()
    assert torch.cuda.is_available() and torch.cuda.is_initialized()
    return [torch.cuda.device_count()]


@check("torch.cuda.current_device", "torch.cuda.set_device", "torch.cuda.device", "torch.cuda.device_of")
def _current() -> Any:
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1
    torch.cuda.set_device(0)
    with torch.cuda.device(1):
        inner = torch.cuda.current_device()
    with torch.cuda.device_of(torch.ones(1, device="cuda:1")):
        of = torch.cuda.current_device()
    with torch.cuda.device_of(torch.ones(1)):
        host = torch.cuda.current_device()
    try:
        torch.cuda.set_device(torch.cuda.device_count())
        bad = "accepted"
    except Exception as exc:  # noqa: BLE001 - CUDA's error class is the fingerprint
        bad = kind(exc)
    return [inner, of, host, torch.cuda.current_device(), bad]


@check("torch.cuda.get_device_properties", "torch.cuda.get_device_name", "torch.cuda.get_device_capability",
       "torch.cuda.get_arch_list", "torch.cuda.get_gencode_flags", "torch.cuda.is_bf16_supported",
       "torch.cuda.is_tf32_supported", "torch.cuda.has_half", "torch.cuda.has_magma", "torch.cuda.can_device_access_peer")
def _properties() -> Any:
    props = torch.cuda.get_device_properties(1)
    for attr in ("name", "major", "minor", "total_memory", "multi_processor_count", "uuid", "L2_cache_size"):
        assert hasattr(props, attr), attr
    assert isinstance(torch.cuda.get_device_name(0), str) and torch.cuda.get_device_name() == props.name or True
    major, minor = torch.cuda.get_device_capability(0)
    assert f"sm_{major}{minor}" in torch.cuda.get_arch_list() or major >= 9
    assert "-gencode" in torch.cuda.get_gencode_flags()
    return [kind(torch.cuda.get_device_capability()), torch.cuda.is_bf16_supported(), torch.cuda.is_tf32_supported(),
            torch.cuda.has_half, torch.cuda.has_magma, torch.cuda.can_device_access_peer(0, 1),
            kind(torch.cuda.get_arch_list())]


# ---- streams and events ----------------------------------------------------------------------------
@check("torch.cuda.Stream", "torch.cuda.Event", "torch.cuda.current_stream", "torch.cuda.default_stream",
       "torch.cuda.set_stream", "torch.cuda.stream", "torch.cuda.synchronize", "torch.cuda.StreamContext",
       "torch.cuda.streams", "torch.cuda.is_current_stream_capturing", "torch.cuda.graphs.is_current_stream_capturing")
def _streams() -> Any:
    s = torch.cuda.Stream(device=1)
    assert s.device == torch.device("cuda:1") and isinstance(s, torch.cuda.Stream)
    assert torch.cuda.current_stream(0) == torch.cuda.default_stream(0)
    with torch.cuda.stream(s):
        inside = torch.cuda.current_device(), torch.cuda.current_stream(1) == s
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.ones(4, device="cuda").sum()
    end.record()
    end.synchronize()
    torch.cuda.synchronize()
    assert start.elapsed_time(end) >= 0 and end.query()
    with torch.cuda.StreamContext(s):
        in_context = torch.cuda.current_stream(1) == s
    torch.cuda.set_stream(torch.cuda.default_stream(0))
    s.wait_stream(torch.cuda.current_stream(1))
    return [list(inside), in_context, torch.cuda.is_current_stream_capturing(), s.query(),
            torch.cuda.streams.Stream is torch.cuda.Stream]


# ---- CUDA graphs ---------------------------------------------------------------------------------------
@check("torch.cuda.CUDAGraph", "torch.cuda.graph", "torch.cuda.graph_pool_handle", "torch.cuda.make_graphed_callables",
       "torch.cuda.graphs.CUDAGraph", "torch.cuda.graphs.graph", "torch.cuda.graphs.graph_pool_handle",
       "torch.cuda.graphs.make_graphed_callables")
def _graphs() -> Any:
    x = torch.arange(6.0, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        (x * 2 + 1).sum()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=torch.cuda.graph_pool_handle()):
        capturing = torch.cuda.is_current_stream_capturing()
        y = (x * 2 + 1).cumsum(0)
        x.add_(1)
    after_capture = x.tolist()
    g.replay()
    replayed = [x.tolist(), y.tolist()]
    try:
        torch.cuda.CUDAGraph().capture_begin()
        default_stream = "accepted"
    except RuntimeError as exc:
        default_stream = "non-default stream" in str(exc)
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2).cuda()
    graphed = torch.cuda.make_graphed_callables(lin, (torch.ones(4, 3, device="cuda", requires_grad=True),))
    inp = torch.full((4, 3), 0.5, device="cuda", requires_grad=True)
    graphed(inp).sum().backward()
    grad_matches = torch.allclose(inp.grad, lin.weight.sum(0).expand(4, 3))
    return [capturing, after_capture, replayed, default_stream, grad_matches, kind(torch.cuda.graph_pool_handle())]


# ---- random numbers ----------------------------------------------------------------------------------
@check("torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.seed", "torch.cuda.seed_all",
       "torch.cuda.initial_seed", "torch.cuda.get_rng_state", "torch.cuda.set_rng_state",
       "torch.cuda.get_rng_state_all", "torch.cuda.set_rng_state_all", "torch.cuda.default_generators",
       "torch.cuda.random")
def _random() -> Any:
    torch.cuda.manual_seed_all(7)
    assert torch.cuda.initial_seed() == 7
    state = torch.cuda.get_rng_state(1)
    first = torch.rand(5, device="cuda:1")
    torch.cuda.set_rng_state(state, 1)
    assert torch.equal(torch.rand(5, device="cuda:1"), first)
    states = torch.cuda.get_rng_state_all()
    assert len(states) == torch.cuda.device_count() and all(s.dtype == torch.uint8 for s in states)
    torch.cuda.set_rng_state_all(states)
    generators = torch.cuda.default_generators
    assert len(generators) == torch.cuda.device_count() and generators[1].device == torch.device("cuda:1")
    assert isinstance(generators[0], torch.Generator)
    generators[1].manual_seed(3)
    offset_before = generators[1].get_offset()
    torch.randn(10, device="cuda:1")
    moved = generators[1].get_offset() - offset_before
    snapshot = generators[1].graphsafe_get_state()
    generators[0].graphsafe_set_state(snapshot)
    assert generators[0].initial_seed() == 3
    torch.cuda.seed()
    torch.cuda.seed_all()
    # torch.cuda.random's own functions (they keep their own references to torch.cuda's)
    torch.cuda.random.manual_seed(11)
    assert torch.cuda.random.initial_seed() == 11
    assert len(torch.cuda.random.get_rng_state_all()) == torch.cuda.device_count()
    g = torch.Generator(device="cuda:1").manual_seed(5)
    a = torch.randn(3, device="cuda:1", generator=g)
    b = torch.randn(3, device="cuda:1", generator=torch.Generator(device="cuda:1").manual_seed(5))
    assert torch.equal(a, b) and a.device == torch.device("cuda:1")
    restored = pickle.loads(pickle.dumps(g))
    assert restored.device == torch.device("cuda:1") and restored.initial_seed() == 5
    return [list(state.shape), str(state.dtype), moved, kind(snapshot), g.get_offset()]


@check("torch.cuda.random.get_rng_state", "torch.cuda.random.set_rng_state", "torch.cuda.random.get_rng_state_all",
       "torch.cuda.random.set_rng_state_all", "torch.cuda.random.manual_seed", "torch.cuda.random.manual_seed_all",
       "torch.cuda.random.seed", "torch.cuda.random.seed_all", "torch.cuda.random.initial_seed")
def _random_module() -> Any:
    torch.cuda.random.manual_seed_all(2)
    state = torch.cuda.random.get_rng_state(1)
    x = torch.rand(3, device="cuda:1")
    torch.cuda.random.set_rng_state(state, 1)
    assert torch.equal(torch.rand(3, device="cuda:1"), x)
    torch.cuda.random.set_rng_state_all(torch.cuda.random.get_rng_state_all())
    torch.cuda.random.seed()
    torch.cuda.random.seed_all()
    return [list(state.shape), len(torch.cuda.random.get_rng_state_all())]


# ---- memory ----------------------------------------------------------------------------------------
MEMORY_NAMES = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_cached",
                "max_memory_cached", "mem_get_info", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
                "memory_snapshot", "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
                "reset_accumulated_memory_stats", "empty_cache", "set_per_process_memory_fraction",
                "get_per_process_memory_fraction", "get_allocator_backend", "caching_allocator_enable",
                "caching_allocator_disabled", "list_gpu_processes", "host_memory_stats",
                "host_memory_stats_as_nested_dict", "reset_accumulated_host_memory_stats",
                "reset_peak_host_memory_stats", "ipc_collect", "device_memory_used", "memory_usage", "utilization")


@check(*[f"torch.cuda.{n}" for n in MEMORY_NAMES], "torch.cuda.memory",
       *[f"torch.cuda.memory.{n}" for n in MEMORY_NAMES if n not in ("ipc_collect", "device_memory_used",
                                                                     "memory_usage", "utilization")])
def _memory() -> Any:
    for name in MEMORY_NAMES:  # torch.cuda.memory's functions are torch.cuda's
        if hasattr(torch.cuda.memory, name):
            assert getattr(torch.cuda.memory, name) is getattr(torch.cuda, name), name
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(1)
    x = torch.empty(1024, 1024, device="cuda:1")
    grown = torch.cuda.memory_allocated(1) - before
    assert grown >= x.numel() * 4 and torch.cuda.max_memory_allocated(1) >= torch.cuda.memory_allocated(1)
    assert torch.cuda.memory_reserved(1) >= torch.cuda.memory_allocated(1)
    assert torch.cuda.max_memory_reserved(1) >= torch.cuda.memory_reserved(1)
    assert torch.cuda.memory_cached(1) == torch.cuda.memory_reserved(1)
    assert torch.cuda.max_memory_cached(1) == torch.cuda.max_memory_reserved(1)
    free, total = torch.cuda.mem_get_info(1)
    assert 0 <= free <= total
    stats = torch.cuda.memory_stats(1)
    nested = torch.cuda.memory_stats_as_nested_dict(1)
    assert stats["allocated_bytes.all.current"] == nested["allocated_bytes"]["all"]["current"]
    assert isinstance(torch.cuda.memory_summary(1), str) and isinstance(torch.cuda.memory_snapshot(), list)
    del x
    torch.cuda.reset_peak_memory_stats(1)
    torch.cuda.reset_max_memory_allocated(1)
    torch.cuda.reset_max_memory_cached(1)
    torch.cuda.reset_accumulated_memory_stats(1)
    assert torch.cuda.max_memory_allocated(1) == torch.cuda.memory_allocated(1)
    torch.cuda.set_per_process_memory_fraction(0.5, 1)
    fraction = torch.cuda.get_per_process_memory_fraction(1)
    torch.cuda.set_per_process_memory_fraction(1.0, 1)
    torch.cuda.caching_allocator_enable(True)
    if hasattr(torch.cuda, "caching_allocator_disabled"):  # newer torch only
        with torch.cuda.caching_allocator_disabled():
            pass
    host = optional("host_memory_stats")
    optional("host_memory_stats_as_nested_dict")
    optional("reset_accumulated_host_memory_stats")
    optional("reset_peak_host_memory_stats")
    torch.cuda.ipc_collect()
    with contextlib.suppress(ModuleNotFoundError):  # nvidia-smi's readings need pynvml on a real GPU
        assert isinstance(torch.cuda.list_gpu_processes(1), str)
        assert 0 <= torch.cuda.utilization(1) <= 100 and 0 <= torch.cuda.memory_usage(1) <= 100
        assert torch.cuda.device_memory_used(1) >= 0
    return [grown >= 4 * 2**20, fraction, torch.cuda.get_allocator_backend(), kind(stats), kind(host),
            "allocated_bytes.all.current" in stats]


# ---- torch.accelerator ------------------------------------------------------------------------------
@check(*[f"torch.accelerator.{n}" for n in (
    "current_accelerator", "current_device_idx", "current_device_index", "current_stream", "device_count",
    "device_index", "empty_cache", "empty_host_cache", "get_device_capability", "get_memory_info", "is_available",
    "max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved", "memory_stats",
    "reset_accumulated_memory_stats", "reset_peak_memory_stats", "set_device_idx", "set_device_index", "set_stream",
    "synchronize")])
def _accelerator() -> Any:
    acc = torch.accelerator
    assert acc.is_available() and acc.current_accelerator() == torch.device("cuda")
    acc.set_device_index(1)
    assert acc.current_device_index() == 1
    with acc.device_index(0):
        inner = acc.current_device_index()
    acc.set_device_index(0)
    found = [inner, acc.device_count()]
    for name, call in (("set_device_idx", lambda: acc.set_device_idx(0)), ("current_device_idx", lambda: acc.current_device_idx()),
                       ("current_stream", lambda: acc.current_stream(0)), ("synchronize", lambda: acc.synchronize()),
                       ("set_stream", lambda: acc.set_stream(acc.current_stream(0))), ("empty_cache", lambda: acc.empty_cache()),
                       ("empty_host_cache", lambda: acc.empty_host_cache()),
                       ("get_device_capability", lambda: sorted(acc.get_device_capability(0))[:2]),
                       ("get_memory_info", lambda: len(acc.get_memory_info(0))),
                       ("memory_allocated", lambda: acc.memory_allocated(0) >= 0),
                       ("max_memory_allocated", lambda: acc.max_memory_allocated(0) >= 0),
                       ("memory_reserved", lambda: acc.memory_reserved(0) >= 0),
                       ("max_memory_reserved", lambda: acc.max_memory_reserved(0) >= 0),
                       ("memory_stats", lambda: kind(acc.memory_stats(0))),
                       ("reset_accumulated_memory_stats", lambda: acc.reset_accumulated_memory_stats(0)),
                       ("reset_peak_memory_stats", lambda: acc.reset_peak_memory_stats(0))):
        if hasattr(acc, name):
            out = call()
            found.append(out if isinstance(out, (bool, int, str, list)) else kind(out))
    return found


# ---- torch.backends ----------------------------------------------------------------------------------
@check(*[f"torch.backends.cuda.{n}" for n in (
    "is_built", "is_flash_attention_available", "can_use_flash_attention", "can_use_efficient_attention",
    "can_use_cudnn_attention", "is_ck_sdpa_available", "SDPAParams", "matmul", "cuBLASModule",
    "preferred_linalg_library", "preferred_blas_library", "preferred_rocm_fa_library", "cublas_workspace_size",
    "cublaslt_workspace_size", "blas_workspace_size", "enable_cudnn_sdp", "cudnn_sdp_enabled", "enable_flash_sdp",
    "flash_sdp_enabled", "enable_mem_efficient_sdp", "mem_efficient_sdp_enabled", "math_sdp_enabled",
    "enable_math_sdp", "allow_fp16_bf16_reduction_math_sdp", "fp16_bf16_reduction_math_sdp_allowed", "sdp_kernel")])
def _backends_cuda() -> Any:
    b = torch.backends.cuda
    assert b.is_built() and b.is_flash_attention_available()
    previous = b.matmul.allow_tf32
    b.matmul.allow_tf32 = True
    assert b.matmul.allow_tf32
    b.matmul.allow_tf32 = previous
    for enable, enabled in (("enable_flash_sdp", "flash_sdp_enabled"), ("enable_mem_efficient_sdp", "mem_efficient_sdp_enabled"),
                            ("enable_math_sdp", "math_sdp_enabled"), ("enable_cudnn_sdp", "cudnn_sdp_enabled")):
        before = getattr(b, enabled)()
        getattr(b, enable)(not before)
        assert getattr(b, enabled)() == (not before)
        getattr(b, enable)(before)
    q = torch.randn(1, 2, 8, 16, device="cuda", dtype=torch.float16)
    if hasattr(b, "SDPAParams"):
        with contextlib.suppress(TypeError):  # its signature changes between versions
            b.can_use_flash_attention(b.SDPAParams(q, q, q, None, 0.0, False, False))
    if hasattr(b, "allow_fp16_bf16_reduction_math_sdp"):
        b.allow_fp16_bf16_reduction_math_sdp(b.fp16_bf16_reduction_math_sdp_allowed())
    with contextlib.suppress(Exception):
        b.preferred_linalg_library()
    with contextlib.suppress(Exception):
        b.preferred_blas_library()
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    optional("is_ck_sdpa_available", module=b)  # ROCm's composable kernels: False on CUDA, absent before 2.13
    return [out.device.type, str(out.dtype)]


@check(*[f"torch.backends.cudnn.{n}" for n in (
    "is_available", "version", "is_acceptable", "set_flags", "flags", "enabled", "benchmark", "benchmark_limit",
    "deterministic", "allow_tf32", "fp32_precision")])
def _cudnn() -> Any:
    c = torch.backends.cudnn
    c.benchmark = True
    c.deterministic = False
    with c.flags(enabled=True, benchmark=False, deterministic=True):
        inside = c.deterministic
    conv = torch.nn.Conv2d(3, 4, 3).cuda()
    out = conv(torch.randn(1, 3, 8, 8, device="cuda"))
    return [inside, out.device.type, kind(c.is_available())]


# ---- profiling, NVTX, legacy types, errors ---------------------------------------------------------------
@check("torch.cuda.nvtx", "torch.cuda.nvtx.range_push", "torch.cuda.nvtx.range_pop", "torch.cuda.nvtx.range_start",
       "torch.cuda.nvtx.range_end", "torch.cuda.nvtx.mark", "torch.cuda.nvtx.range", "torch.cuda.profiler",
       "torch.cuda.profiler.start", "torch.cuda.profiler.stop", "torch.cuda.profiler.profile")
def _profiling() -> Any:
    with torch.cuda.nvtx.range("outer"):
        torch.cuda.nvtx.range_push("inner")
        torch.cuda.nvtx.mark("here")
        torch.cuda.nvtx.range_pop()
    handle = torch.cuda.nvtx.range_start("span")
    torch.cuda.nvtx.range_end(handle)
    with contextlib.suppress(Exception):  # cudaProfilerStart fails outside a profiler on some drivers
        with torch.cuda.profiler.profile():
            pass
        torch.cuda.profiler.start()
        torch.cuda.profiler.stop()
    return [True]


LEGACY = ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")


@check(*[f"torch.cuda.{k}Tensor" for k in LEGACY])
def _legacy_types() -> Any:
    out = []
    for k in LEGACY:
        t = getattr(torch.cuda, f"{k}Tensor")(2)
        assert t.is_cuda and isinstance(t, getattr(torch.cuda, f"{k}Tensor"))
        out.append(str(t.dtype))
    return out


@check("torch.cuda.CudaError", "torch.cuda.DeferredCudaCallError", "torch.cuda.OutOfMemoryError",
       "torch.cuda.AcceleratorError", "torch.cuda.cudaStatus", "torch.cuda.check_error")
def _errors() -> Any:
    assert issubclass(torch.cuda.OutOfMemoryError, RuntimeError)
    torch.cuda.check_error(0)
    return [torch.cuda.cudaStatus.SUCCESS, issubclass(torch.cuda.DeferredCudaCallError, Exception)]


@check("torch.cuda.amp", "torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler", "torch.cuda.amp.custom_fwd",
       "torch.cuda.amp.custom_bwd", "torch.cuda.amp.amp_definitely_not_available")
def _amp() -> Any:
    model = torch.nn.Linear(4, 4).cuda()
    scaler = torch.amp.GradScaler("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(torch.randn(2, 4, device="cuda"))
    scaler.scale(out.float().sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.cuda.amp.amp_definitely_not_available()
    return [str(out.dtype), scaler.get_scale() > 0]


@check("torch.cuda.comm", "torch.cuda.comm.broadcast", "torch.cuda.comm.broadcast_coalesced", "torch.cuda.comm.gather",
       "torch.cuda.comm.reduce_add", "torch.cuda.comm.reduce_add_coalesced", "torch.cuda.comm.scatter",
       "torch.cuda.nccl", "torch.cuda.nccl.all_gather", "torch.cuda.nccl.all_reduce", "torch.cuda.nccl.broadcast",
       "torch.cuda.nccl.reduce", "torch.cuda.nccl.reduce_scatter")
def _single_process_comm() -> Any:
    """Checked cell by cell against NCCL in tests/test_cuda_comm_sim.py; here: each name runs."""
    import torch.cuda.comm as comm

    x = torch.arange(4.0, device="cuda:0")
    copies = comm.broadcast(x, [0, 1])
    comm.broadcast_coalesced([x], [0, 1])
    total = comm.reduce_add(list(copies), 0)
    comm.reduce_add_coalesced([[c] for c in copies], 0)
    parts = comm.scatter(x, [0, 1])
    joined = comm.gather(parts, 0, 0)
    ins = [torch.ones(2, device=f"cuda:{i}") for i in range(2)]
    torch.cuda.nccl.all_reduce(ins)
    torch.cuda.nccl.broadcast(ins)
    torch.cuda.nccl.reduce(ins)
    outs = [torch.empty(4, device=f"cuda:{i}") for i in range(2)]
    torch.cuda.nccl.all_gather(ins, outs)
    halves = [torch.empty(1, device=f"cuda:{i}") for i in range(2)]
    torch.cuda.nccl.reduce_scatter(ins, halves)
    return [total.tolist(), joined.tolist(), ins[0].tolist()]


@check("torch.cuda.graphs", "torch.cuda.jiterator", "torch.cuda.tunable", "torch.cuda.sparse", "torch.cuda.gds",
       "torch.cuda.green_contexts", "torch.cuda.get_sync_debug_mode", "torch.cuda.set_sync_debug_mode",
       "torch.cuda.gds.is_available", "torch.cuda.graph_annotations")
def _modules_and_modes() -> Any:
    gds_available = optional("is_available", module=torch.cuda.gds)  # torch >= 2.15
    torch.cuda.set_sync_debug_mode("warn")
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(0)
    assert gds_available in (None, False, True)
    return [mode]


def run_checks(names: list[str]) -> dict[str, Any]:
    fingerprints: dict[str, Any] = {}
    done: dict[Callable, Any] = {}
    for name in names:
        fn = CHECKS[name]
        if fn not in done:
            try:
                done[fn] = fn()
            except Exception as exc:  # noqa: BLE001 - reported per name below
                done[fn] = {"error": f"{type(exc).__name__}: {exc}"}
        fingerprints[name] = done[fn]
    return fingerprints


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", help="real GPUs: write the fingerprints of every checked name here")
    parser.add_argument("--reference", help="simulated GPUs: compare with fingerprints recorded on real GPUs")
    args = parser.parse_args()
    if args.record:
        versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)}
        fingerprints = run_checks(sorted(CHECKS))
        with open(args.record, "w") as f:
            json.dump({"versions": versions, "fingerprints": fingerprints}, f, indent=1, sort_keys=True)
        return 0
    from simgpu.cuda_sim import surface

    problems = [f"{name}: in neither the simulated nor the refused list (simgpu/cuda_sim/surface.py)"
                for name in surface.unclassified()]
    names = surface.surface()
    refused = [n for n in names if surface.classify(n) == "refused"]
    for name in refused:
        module_name, short = name.rsplit(".", 1)
        target = getattr(__import__("importlib").import_module(module_name), short)
        if not surface.refuses(target, name.split(".")[-1]):
            problems.append(f"{name}: refused in the table, but calling it does not raise the one-line refusal")
    checked = [n for n in names if surface.classify(n) in ("simulated", "torch")]
    problems += [f"{name}: simulated or torch's own, but no check calls it (add one here)"
                 for name in checked if name not in CHECKS]
    fingerprints = run_checks([n for n in checked if n in CHECKS])
    problems += [f"{name}: {fp['error']}" for name, fp in fingerprints.items() if isinstance(fp, dict) and "error" in fp]
    if args.reference:
        with open(args.reference) as f:
            reference = json.load(f)["fingerprints"]
        compared = 0
        for name, expected in reference.items():
            if isinstance(expected, dict) and "error" in expected:
                continue  # that torch lacked the name, or the check could not run there: nothing to compare
            if name in fingerprints:
                compared += 1
                if fingerprints[name] != expected:
                    problems.append(f"{name}: CUDA gave {expected}, simulated {fingerprints[name]}")
        print(f"compared with real CUDA: {compared} names")
    print(f"surface: {len(names)} names: {len(checked)} simulated or torch's own (all checked), {len(refused)} refused, "
          f"{len(surface.unclassified())} unclassified")
    for problem in problems:
        print("PROBLEM", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

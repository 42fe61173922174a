"""The public CUDA surface of the installed torch, and what the simulation does with each name.

Every public name of the modules in SURFACE_MODULES is, under simulation, one of:
- simulated: simgpu puts its own implementation there (the tables in api.py and comm.py);
- torch's own: torch's code is left as it is and is right on simulated GPUs, for the reason given
  (an exception class, a context manager over simulated functions, a flag);
- refused: calling it (or making one, for a class) raises SimulationError with one line naming it:
  `simgpu: torch.cuda.X cannot run on simulated GPUs: why`. Classes stay classes, so annotations
  such as `torch.cuda.CUDAGraph | None` still work.
`unclassified()` lists the names of the installed torch that are in none of the three: the test
suite fails on any, so a new torch cannot add a name that slips by (tests/test_cuda_surface.py).
"""
from __future__ import annotations

import functools
import importlib
import types
from typing import Any, Callable

from simgpu.cuda_sim.errors import SimulationError

SURFACE_MODULES = (
    "torch.cuda", "torch.cuda.random", "torch.cuda.memory", "torch.cuda.streams", "torch.cuda.graphs",
    "torch.cuda.amp", "torch.cuda.nvtx", "torch.cuda.profiler", "torch.cuda.comm", "torch.cuda.nccl",
    "torch.cuda.jiterator", "torch.cuda.tunable", "torch.cuda.sparse", "torch.cuda.gds",
    "torch.cuda.green_contexts", "torch.accelerator", "torch.backends.cuda", "torch.backends.cudnn",
)

_GRAPHS = "it exposes a captured CUDA graph's kernels and nodes, which a simulated capture does not have (graphs.py)"
_ALLOCATOR = "it hands out raw device pointers of CUDA's allocator, which a CPU process does not have"
_NVML = "it reads a physical GPU's sensor through NVML"
_TUNABLE = "TunableOp tunes CUDA GEMM kernels, which a CPU does not run"
_SPARSE_TYPES = "legacy sparse CUDA tensor types; use torch.sparse_coo_tensor(..., device='cuda')"
_STORAGE_TYPES = "legacy typed CUDA storages; use torch.empty(n, dtype=..., device='cuda').untyped_storage()"
_GDS = "GPUDirect Storage reads files straight into GPU memory"

REFUSED: dict[str, str] = {
    "torch.accelerator.Graph": _GRAPHS, "torch.cuda.export_dot": _GRAPHS, "torch.cuda.export_graph_data": _GRAPHS,
    "torch.cuda.caching_allocator_alloc": _ALLOCATOR, "torch.cuda.caching_allocator_delete": _ALLOCATOR,
    "torch.cuda.CUDAPluggableAllocator": "a pluggable allocator is a compiled CUDA allocator library",
    "torch.cuda.change_current_allocator": "a pluggable allocator is a compiled CUDA allocator library",
    "torch.cuda.MemPool": "memory pools belong to CUDA's caching allocator",
    "torch.cuda.use_mem_pool": "memory pools belong to CUDA's caching allocator",
    "torch.cuda.ExternalStream": "it wraps a cudaStream_t made outside torch",
    "torch.cuda.get_stream_from_external": "it wraps a cudaStream_t made outside torch",
    "torch.cuda.GreenContext": "green contexts partition a GPU's SMs",
    "torch.cuda.cudart": "it is the CUDA runtime library itself",
    "torch.cuda.current_blas_handle": "it is a cuBLAS handle, a pointer into the CUDA runtime",
    "torch.cuda.current_solver_handle": "it is a cuSOLVER handle, a pointer into the CUDA runtime",
    "torch.cuda.temperature": _NVML, "torch.cuda.power_draw": _NVML, "torch.cuda.clock_rate": _NVML,
    "torch.cuda.jiterator._create_jit_fn": "the jiterator compiles CUDA kernels at run time",
    "torch.cuda.jiterator._create_multi_output_jit_fn": "the jiterator compiles CUDA kernels at run time",
    **{f"torch.cuda.{kind}Storage": _STORAGE_TYPES for kind in (
        "BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat", "Double", "Float", "Half", "Int", "Long",
        "Short")},
    **{f"torch.cuda.sparse.{kind}Tensor": _SPARSE_TYPES for kind in (
        "BFloat16", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")},
    "torch.backends.cuda.cufft_plan_cache": "cuFFT plans are CUDA objects (torch.fft runs on the host's FFT)",
    "torch.backends.cuda.cuFFTPlanCache": "cuFFT plans are CUDA objects (torch.fft runs on the host's FFT)",
    "torch.backends.cuda.cuFFTPlanCacheManager": "cuFFT plans are CUDA objects (torch.fft runs on the host's FFT)",
    "torch.backends.cuda.cuFFTPlanCacheAttrContextProp": "cuFFT plans are CUDA objects (torch.fft runs on the host's FFT)",
}

# Modules that are CUDA-only as a whole: every public name they have, today's or a later torch's, is
# refused for the module's reason, except the names the simulation provides (api.py).
REFUSED_MODULES: dict[str, str] = {
    "torch.cuda.graphs": _GRAPHS, "torch.cuda.tunable": _TUNABLE, "torch.cuda.gds": _GDS,
    "torch.cuda.green_contexts": "green contexts partition a GPU's SMs",
}

# factories whose product is refused when it runs, not when it is made (as CUDA compiles a jiterator
# function at its first call)
_REFUSED_WHEN_CALLED = ("torch.cuda.jiterator._create_jit_fn", "torch.cuda.jiterator._create_multi_output_jit_fn")

_OWN_EXCEPTION = "an exception class: raising and catching it needs no GPU"
_OVER_SIMULATED = "torch's Python over functions the simulation provides"
_FLAG = "a global setting torch keeps in Python or in its CPU library alike; it changes no result here"
_SUBMODULE = "a submodule: its names are classified one by one"
_OVER_PRIMITIVES = "torch's Python over the torch._C primitives that comm.py simulates"

TORCH_OWN: dict[str, str] = {
    "torch.cuda.CudaError": _OWN_EXCEPTION, "torch.cuda.DeferredCudaCallError": _OWN_EXCEPTION,
    "torch.cuda.OutOfMemoryError": _OWN_EXCEPTION, "torch.cuda.AcceleratorError": _OWN_EXCEPTION,
    "torch.cuda.cudaStatus": "constants",
    "torch.cuda.StreamContext": _OVER_SIMULATED, "torch.cuda.amp": _SUBMODULE, "torch.cuda.graphs": _SUBMODULE,
    "torch.cuda.memory": _SUBMODULE, "torch.cuda.nccl": _SUBMODULE, "torch.cuda.nvtx": _SUBMODULE,
    "torch.cuda.profiler": _SUBMODULE, "torch.cuda.random": _SUBMODULE, "torch.cuda.streams": _SUBMODULE,
    "torch.cuda.jiterator": _SUBMODULE, "torch.cuda.gds": _SUBMODULE, "torch.cuda.tunable": _SUBMODULE,
    "torch.cuda.sparse": _SUBMODULE, "torch.cuda.comm": _SUBMODULE, "torch.cuda.green_contexts": _SUBMODULE,
    "torch.cuda.graph_annotations": _SUBMODULE,
    **{f"torch.cuda.{where}{name}": "torch's Python over the simulated CUDAGraph (graphs.py)" for where in ("", "graphs.")
       for name in ("graph", "make_graphed_callables")},
    **{f"torch.cuda.comm.{name}": _OVER_PRIMITIVES for name in (
        "broadcast", "broadcast_coalesced", "reduce_add", "reduce_add_coalesced", "scatter", "gather")},
    **{f"torch.cuda.nccl.{name}": _OVER_PRIMITIVES for name in (
        "all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter")},
    "torch.cuda.amp.autocast": "torch.autocast('cuda'), which casts on simulated GPUs (autocast.py)",
    "torch.cuda.amp.custom_fwd": _OVER_SIMULATED, "torch.cuda.amp.custom_bwd": _OVER_SIMULATED,
    "torch.cuda.amp.GradScaler": "torch.amp.GradScaler('cuda'), whose unscale and update ops run on the host",
    "torch.cuda.amp.amp_definitely_not_available": _OVER_SIMULATED,
    "torch.cuda.nvtx.range": _OVER_SIMULATED, "torch.cuda.profiler.profile": _OVER_SIMULATED,
    "torch.backends.cuda.cuBLASModule": _FLAG, "torch.backends.cuda.matmul": _FLAG,
    "torch.backends.cuda.preferred_linalg_library": _FLAG, "torch.backends.cuda.preferred_blas_library": _FLAG,
    "torch.backends.cuda.preferred_rocm_fa_library": _FLAG, "torch.backends.cuda.SDPAParams": _FLAG,
    "torch.backends.cuda.cublas_workspace_size": _FLAG, "torch.backends.cuda.cublaslt_workspace_size": _FLAG,
    "torch.backends.cuda.blas_workspace_size": _FLAG,
    **{f"torch.backends.cuda.{name}": _FLAG for name in (
        "enable_cudnn_sdp", "cudnn_sdp_enabled", "enable_flash_sdp", "flash_sdp_enabled", "enable_mem_efficient_sdp",
        "mem_efficient_sdp_enabled", "math_sdp_enabled", "enable_math_sdp", "allow_fp16_bf16_reduction_math_sdp",
        "fp16_bf16_reduction_math_sdp_allowed", "sdp_kernel")},
    **{f"torch.backends.cudnn.{name}": "cuDNN is absent, as on a GPU machine with cuDNN turned off: ops take "
                                       "their native kernels; the flags are kept" for name in (
        "is_available", "version", "is_acceptable", "set_flags", "flags", "enabled", "benchmark", "benchmark_limit",
        "deterministic", "allow_tf32", "fp32_precision")},
}


def public_names(module_name: str) -> list[str]:
    """The public names of one module of the surface: its __all__, else what it defines itself."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(names)
    if module_name == "torch.backends.cudnn":  # a module object of its own class: its flags are properties
        return sorted(n for n in TORCH_OWN if n.startswith("torch.backends.cudnn.") and hasattr(module, n.rsplit(".", 1)[1]))
    own = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if getattr(value, "__module__", module_name) == module_name:
            own.append(name)
    return sorted(own)


def _exists(module_name: str) -> bool:
    """Whether the installed torch has this module (torch.backends.cudnn replaces itself by an object)."""
    try:
        importlib.import_module(module_name)
    except ImportError:
        return False
    return True


def surface() -> list[str]:
    """Every public name of the installed torch's CUDA surface, qualified ('torch.cuda.graph')."""
    names = []
    for module_name in SURFACE_MODULES:
        if not _exists(module_name):
            continue
        names += [n if n.startswith("torch.") else f"{module_name}.{n}" for n in public_names(module_name)]
    return sorted(set(names))


@functools.lru_cache(maxsize=None)
def simulated_names() -> frozenset[str]:
    """The qualified names whose implementation the simulation provides (fixed tables: worked out once;
    install_refusals asks for every name of the modules refused as a whole at every process's start)."""
    from simgpu.cuda_sim import api, legacy_types

    tables = {"torch.cuda": api.TORCH_CUDA, "torch.accelerator": api.TORCH_ACCELERATOR,
              "torch.backends.cuda": api.BACKENDS_CUDA, "torch.cuda.gds": api.GDS}
    found = {f"torch.cuda.{name}" for name in api.TORCH_CUDA}
    found |= {f"torch.cuda.{name}" for name in ("default_generators", *legacy_types.CUDA_TYPES)}
    for module_name, table in tables.items():
        found |= {f"{module_name}.{name}" for name in table}
    for module_name in api.CUDA_SUBMODULES + ("torch.cuda.nvtx",):
        found |= {f"{module_name}.{name}" for name in api.TORCH_CUDA}
    found |= {f"torch.cuda.nvtx.{name}" for name in api.NVTX_NAMES}
    found |= {f"torch.cuda.streams.{name}" for name in ("Stream", "Event")}
    found |= {f"torch.cuda.profiler.{name}" for name in api.PROFILER_NAMES}
    return frozenset(found)


def refusal_reason(name: str) -> str | None:
    """Why a name is refused, or None: named in REFUSED, exported by torch.cuda from a submodule where
    it is refused, or in a module refused as a whole and not simulated."""
    canonical = _as_in_torch_cuda(name)
    if canonical in REFUSED:
        return REFUSED[canonical]
    module_name = name.rsplit(".", 1)[0]
    if module_name in REFUSED_MODULES and name not in simulated_names() and name not in TORCH_OWN:
        return REFUSED_MODULES[module_name]
    return None


def _as_in_torch_cuda(name: str) -> str:
    """torch.cuda.graphs.CUDAGraph is torch.cuda.CUDAGraph: a submodule's name as torch.cuda exports it."""
    module_name, short = name.rsplit(".", 1)
    if module_name.startswith("torch.cuda.") and f"torch.cuda.{short}" in REFUSED:
        return f"torch.cuda.{short}"
    return name


def classify(name: str) -> str | None:
    """'refused', 'simulated', 'torch', or None for a name nobody has decided on."""
    if refusal_reason(name) is not None:
        return "refused"
    if name in simulated_names():
        return "simulated"
    if name in TORCH_OWN:
        return "torch"
    return None


def unclassified() -> list[str]:
    return [name for name in surface() if classify(name) is None]


def refusal_message(name: str) -> str:
    return f"simgpu: {name} cannot run on simulated GPUs: {refusal_reason(name)}"


def _refusing(name: str, original: Any) -> Any:
    """What stands in for a refused name: a class that refuses to be made (annotations and isinstance
    keep working), a module whose every attribute refuses, or a function that refuses."""
    message = refusal_message(name)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise SimulationError(message)

    if isinstance(original, type):
        short = name.rsplit(".", 1)[1]
        return type(short, (), {"__new__": refuse, "__module__": name.rsplit(".", 1)[0], "__qualname__": short,
                                "__doc__": message})
    if isinstance(original, types.ModuleType):
        return None  # a module's names are refused one by one; the module itself stays importable
    if not callable(original):  # an object such as torch.backends.cuda.cufft_plan_cache
        return _RefusedObject(message)
    if name in _REFUSED_WHEN_CALLED:  # making a jiterator function is fine (torch's OpInfo does at import)
        return functools.wraps(original)(lambda *args, **kwargs: functools.wraps(original)(refuse))
    refuse = functools.wraps(original)(refuse)  # torch's own code reads __wrapped__ of some (dynamo)
    refuse.__doc__ = message
    return refuse


class _RefusedObject:
    """Stands in for a refused object: using it in any way (an attribute, an index, a call) refuses."""

    def __init__(self, message: str) -> None:
        object.__setattr__(self, "_message", message)

    def __getattr__(self, name: str) -> Any:
        raise SimulationError(object.__getattribute__(self, "_message"))

    def __getitem__(self, key: Any) -> Any:
        raise SimulationError(object.__getattribute__(self, "_message"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise SimulationError(object.__getattribute__(self, "_message"))


def install_refusals() -> None:
    """Put the refusing stand-ins in place of every refused name the installed torch has, in torch.cuda
    and in the submodule that defines it (torch.cuda.graphs.CUDAGraph is torch.cuda.CUDAGraph)."""
    for name in _refused_names():
        module_name, short = name.rsplit(".", 1)
        if not _exists(module_name):
            continue
        module = importlib.import_module(module_name)
        if not hasattr(module, short):
            continue
        original = getattr(module, short)
        stand_in = _refusing(name, original)
        if stand_in is None:
            continue
        setattr(module, short, stand_in)
        if module_name == "torch.cuda":
            for submodule_name in SURFACE_MODULES:
                submodule = importlib.import_module(submodule_name) if submodule_name.startswith("torch.cuda.") else None
                if submodule is not None and getattr(submodule, short, None) is original:
                    setattr(submodule, short, stand_in)


def _refused_names() -> list[str]:
    """REFUSED's names, and every public name of the modules refused as a whole."""
    names = list(REFUSED)
    for module_name in REFUSED_MODULES:
        if _exists(module_name):
            names += [f"{module_name}.{n}" for n in public_names(module_name)
                      if refusal_reason(f"{module_name}.{n}") is not None and f"{module_name}.{n}" not in REFUSED]
    return names


_CUDA_SOURCES = (".cu", ".cuh")


def _refuse_cuda_extensions(cpp_extension: Any) -> None:
    """torch.utils.cpp_extension.load/load_inline of CUDA code (DeepSpeed's FusedAdam, apex) would stop in
    torch's `CUDA_HOME environment variable is not set`; C++-only extensions still build."""
    for name in ("load", "load_inline"):
        original = getattr(cpp_extension, name, None)
        if original is None:
            continue

        def build(*args: Any, _original: Callable = original, _name: str = name, **kwargs: Any) -> Any:
            sources = kwargs.get("sources", args[1] if len(args) > 1 else ())
            sources = [sources] if isinstance(sources, str) else list(sources or ())
            if kwargs.get("cuda_sources") or kwargs.get("with_cuda") or any(
                    str(s).endswith(_CUDA_SOURCES) for s in sources):
                raise SimulationError(f"simgpu: torch.utils.cpp_extension.{_name} of CUDA code cannot run on simulated "
                                      f"GPUs: its kernels need nvcc and a GPU (use the library's pure-PyTorch path)")
            return _original(*args, **kwargs)

        setattr(cpp_extension, name, functools.wraps(original)(build))


def install_extension_refusals() -> None:
    from simgpu.cuda_sim.import_hooks import after_import

    after_import("torch.utils.cpp_extension", _refuse_cuda_extensions)


def refuses(call: Callable[[], Any], name: str) -> bool:
    """Whether `call` fails with the one-line refusal naming `name` (the tests' check)."""
    try:
        call()
    except SimulationError as exc:
        return name in str(exc)
    return False


# ---- where programs name a device or a dtype: factories, Tensor methods, Module methods ----------------
def _signature_head(obj: Any) -> str:
    """The signature line torch's docstrings start with ('zeros(*size, *, ..., device=None, ...) -> Tensor')."""
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().split("\n\n")[0].split("->")[0]


def device_factories() -> list[str]:
    """torch's functions that take `device=`: each must make its result on the simulated GPU named."""
    import re

    import torch

    return sorted(name for name in dir(torch) if not name.startswith("_") and callable(getattr(torch, name))
                  and not isinstance(getattr(torch, name), type)
                  and re.search(r"\bdevice=", _signature_head(getattr(torch, name))))


def device_or_dtype_tensor_methods() -> list[str]:
    """torch.Tensor's public methods whose signature names a device or a dtype."""
    import re

    import torch

    found = []
    for name in dir(torch.Tensor):
        if name.startswith("_"):
            continue
        head = _signature_head(getattr(torch.Tensor, name, None)).split(")")[0]
        if re.search(r"\b(device|dtype)\b", head):
            found.append(name)
    return sorted(set(found) | {"to", "cpu", "cuda", "type", "type_as", "pin_memory", "double", "float", "half",
                                "bfloat16", "get_device", "is_cuda", "numpy", "tolist", "item"})


def module_device_methods() -> list[str]:
    """nn.Module's methods that move or cast its parameters and buffers."""
    import inspect

    import torch

    found = []
    for name in dir(torch.nn.Module):
        attr = getattr(torch.nn.Module, name)
        if name.startswith("_") or not callable(attr):
            continue
        try:
            parameters = inspect.signature(attr).parameters
        except (TypeError, ValueError):
            continue
        if "device" in parameters or "dtype" in parameters or name in _MODULE_CASTS:
            found.append(name)
    return sorted(found)


_MODULE_CASTS = ("half", "float", "double", "bfloat16", "cuda", "cpu", "type", "to", "to_empty")

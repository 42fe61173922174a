"""Run under `simgpu run --gpus 2`: every way a program names a device or a dtype, enumerated from the
installed torch (simgpu.cuda_sim.surface): each factory taking `device=` in every spelling of a GPU,
each Tensor method and each nn.Module method that moves or casts. A name the installed torch has and
this file has no call for fails, so a new torch cannot add one unchecked."""
import json
import sys

import numpy as np
import torch
import torch.nn as nn

try:
    from simgpu.cuda_sim import surface
except ImportError:  # on a GPU box without simgpu installed: run from a checkout
    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0])
    from simgpu.cuda_sim import surface

problems = []
SIMULATED = bool(__import__("os").environ.get("SIMGPU_GPUS"))


def _refused_message(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        return str(exc)
    return "accepted"

GPU1_FORMS = ["cuda:1", 1, torch.device("cuda", 1), torch.device("cuda:1")]
CURRENT_FORMS = ["cuda", torch.device("cuda")]

# Tensor methods that take or report a device or a dtype
t = torch.arange(6.0, device="cuda:1").reshape(2, 3)
TENSOR_CALLS = {
    "to": lambda: [t.to("cpu").device, t.to(0).device, t.to(torch.float16).dtype, t.to(None, torch.int32).dtype,
                   t.to("cuda:0", torch.float64).device, t.to(torch.ones(1)).device, t.to(device="cuda:1") is t],
    "cpu": lambda: [t.cpu().device], "cuda": lambda: [t.cuda().device, t.cuda(0).device, t.cpu().cuda(1).device],
    "type": lambda: [t.type(), t.type(torch.cuda.DoubleTensor).dtype, t.type(torch.float16).device],
    "type_as": lambda: [torch.ones(2).type_as(t).device, t.type_as(torch.ones(1, dtype=torch.int64)).device],
    "double": lambda: [t.double().dtype, t.double().device], "float": lambda: [t.float().device],
    "half": lambda: [t.half().dtype, t.half().device], "bfloat16": lambda: [t.bfloat16().dtype, t.bfloat16().device],
    "get_device": lambda: [t.get_device(), torch.ones(1).get_device()], "device": lambda: [t.device],
    "is_cuda": lambda: [t.is_cuda, torch.ones(1).is_cuda], "item": lambda: [t[0, 1].item()],
    "tolist": lambda: [t.tolist()], "numpy": lambda: [_refused(lambda: t.numpy()), t.cpu().numpy().dtype],
    "pin_memory": lambda: [_refused(t.pin_memory), torch.ones(2).pin_memory().is_pinned()],
    "is_pinned": lambda: [t.is_pinned()],
    **{name: (lambda name=name: [getattr(t, name)(dtype=torch.float64).dtype, getattr(t, name)(dtype=torch.float64).device])
       for name in ("mean", "nanmean", "nansum", "prod", "sum")},
    **{name: (lambda name=name: [getattr(t.clone(), name)(1, dtype=torch.float64).dtype,
                                 getattr(t.clone(), name)(1, dtype=torch.float64).device])
       for name in ("cumsum", "cumprod")},
    **{name: (lambda name=name: [getattr(t.clone().double(), name)(1, dtype=torch.float64).device])
       for name in ("cumsum_", "cumprod_")},
    **{name: (lambda name=name: [getattr(t, name)(2, 2).device, getattr(t, name)(2, dtype=torch.int8).dtype]
              if name != "new_full" else [t.new_full((2,), 1.0).device, t.new_full((2,), 1, dtype=torch.int8).dtype])
       for name in ("new_empty", "new_ones", "new_zeros", "new_full")},
    "new_empty_strided": lambda: [t.new_empty_strided((2, 2), (2, 1)).device],
    "new_tensor": lambda: [t.new_tensor([1, 2]).device, t.new_tensor([1.0], device="cpu").device],
    "to_dense": lambda: [t.to_dense(dtype=torch.float64).device if "dtype" in (t.to_dense.__doc__ or "") else t.to_dense().device],
    "grad_dtype": lambda: [t.grad_dtype if hasattr(t, "grad_dtype") else None],
    "is_mps": lambda: [t.is_mps], "is_xla": lambda: [t.is_xla],
    **{name: (lambda name=name: [_refused(lambda: getattr(t.cpu(), name)())]) for name in ("ipu", "mtia", "xpu")},
}


def _refused(call):
    """The error class of a call CUDA refuses (a GPU tensor to numpy, pinning a GPU tensor)."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__
    return "accepted"


fingerprints = {}
for name in surface.device_or_dtype_tensor_methods():
    if name not in TENSOR_CALLS:
        problems.append(f"Tensor.{name} takes or reports a device or dtype but has no call here")
        continue
    try:
        fingerprints[f"Tensor.{name}"] = repr(TENSOR_CALLS[name]())
    except Exception as exc:  # noqa: BLE001
        problems.append(f"Tensor.{name}: {type(exc).__name__}: {exc}")

expected_tensor = {
    "to": [torch.device("cpu"), torch.device("cuda:0"), torch.float16, torch.int32, torch.device("cuda:0"),
           torch.device("cpu"), True],
    "cpu": [torch.device("cpu")],
    "type": ["torch.cuda.FloatTensor", torch.float64, torch.device("cuda:1")],
    "get_device": [1, -1], "is_cuda": [True, False], "numpy": ["TypeError", np.dtype("float32")],
    "pin_memory": ["RuntimeError", True], "new_tensor": [torch.device("cuda:1"), torch.device("cpu")],
}
for name, expected in expected_tensor.items():
    got = TENSOR_CALLS[name]()
    if got != expected:
        problems.append(f"Tensor.{name}: {got}, CUDA gives {expected}")

# nn.Module methods that move or cast parameters and buffers
MODULE_CALLS = {
    "to": lambda m: [m.to("cuda:1").weight.device, m.to(torch.float16).weight.dtype, m.to(0, torch.float32).weight.device],
    "cuda": lambda m: [m.cuda(1).weight.device, m.cuda().weight.device], "cpu": lambda m: [m.cpu().weight.device],
    "half": lambda m: [m.cuda().half().weight.dtype], "float": lambda m: [m.float().weight.dtype],
    "double": lambda m: [m.double().weight.dtype], "bfloat16": lambda m: [m.bfloat16().weight.dtype],
    "type": lambda m: [m.type(torch.float64).weight.dtype],
    "to_empty": lambda m: [nn.Linear(2, 2, device="meta").to_empty(device="cuda:1").weight.device],
    **{name: (lambda m, name=name: [_refused(lambda: getattr(m, name)())]) for name in ("ipu", "mtia", "xpu")},
}
for name in surface.module_device_methods():
    if name not in MODULE_CALLS:
        problems.append(f"nn.Module.{name} moves or casts but has no call here")
        continue
    module = nn.Linear(3, 3)
    try:
        fingerprints[f"Module.{name}"] = repr(MODULE_CALLS[name](module))
    except Exception as exc:  # noqa: BLE001
        problems.append(f"nn.Module.{name}: {type(exc).__name__}: {exc}")
m = nn.Linear(3, 3).cuda(1).to(torch.bfloat16)
if (m.weight.device, m.weight.dtype) != (torch.device("cuda:1"), torch.bfloat16):
    problems.append(f"nn.Module.to(bfloat16) after cuda(1): {m.weight.device} {m.weight.dtype}")

if "--record" in sys.argv:  # real GPUs: what CUDA answers, for --reference under simulation
    with open(sys.argv[sys.argv.index("--record") + 1], "w") as f:
        json.dump({"torch": torch.__version__, "cuda": torch.version.cuda, "fingerprints": fingerprints}, f, indent=1)
# factories last: on a GPU box a failing one must not cost the methods' record above
# minimal arguments of each factory; the dtype each makes is compared with the same call on the host
FACTORIES = {
    "arange": ((5,), {}), "bartlett_window": ((4,), {}), "blackman_window": ((4,), {}), "empty": ((2, 3), {}),
    "empty_permuted": (((2, 3), (1, 0)), {}), "empty_strided": (((2, 3), (1, 2)), {}), "eye": ((3,), {}),
    "full": (((2,), 7.0), {}), "hamming_window": ((4,), {}), "hann_window": ((4,), {}), "kaiser_window": ((4,), {}),
    "linspace": ((0, 1, 5), {}), "logspace": ((0, 1, 5), {}), "ones": ((2, 2), {}), "rand": ((3,), {}),
    "randint": ((0, 10, (3,)), {}), "randn": ((3,), {}), "randperm": ((5,), {}), "range": ((0, 4), {}),
    "tensor": (([1.0, 2.0],), {}), "tril_indices": ((3, 3), {}), "triu_indices": ((3, 3), {}), "zeros": ((2, 2), {}),
    "empty_like": ((torch.ones(2),), {}), "full_like": ((torch.ones(2), 3.0), {}), "ones_like": ((torch.ones(2),), {}),
    "rand_like": ((torch.ones(2),), {}), "randint_like": ((torch.ones(2), 5), {}), "randn_like": ((torch.ones(2),), {}),
    "zeros_like": ((torch.ones(2),), {}),
    "sparse_coo_tensor": (([[0, 1]], [1.0, 2.0], (3,)), {}),
    "sparse_csr_tensor": (([0, 1, 2], [0, 1], [1.0, 2.0], (2, 2)), {}),
    "sparse_csc_tensor": (([0, 1, 2], [0, 1], [1.0, 2.0], (2, 2)), {}),
    "sparse_bsr_tensor": (([0, 1], [0], torch.ones(1, 1, 1), (1, 1)), {}),
    "sparse_bsc_tensor": (([0, 1], [0], torch.ones(1, 1, 1), (1, 1)), {}),
    "sparse_compressed_tensor": (([0, 1, 2], [0, 1], [1.0, 2.0], (2, 2)), {"layout": torch.sparse_csr}),
}
NOT_FACTORIES = {"from_file": "reads a file into host memory (shared=True maps it): CUDA refuses device='cuda' alike"}
DETERMINISTIC = {"arange", "eye", "full", "linspace", "logspace", "ones", "range", "tensor", "zeros", "tril_indices",
                 "triu_indices", "full_like", "ones_like", "zeros_like", "bartlett_window", "blackman_window",
                 "hamming_window", "hann_window", "kaiser_window"}

for name in surface.device_factories():
    if name in NOT_FACTORIES:
        continue
    if name not in FACTORIES:
        problems.append(f"torch.{name} takes device= but has no call here")
        continue
    args, kwargs = FACTORIES[name]
    fn = getattr(torch, name)
    if name.startswith("sparse_"):  # refused on simulated GPUs (sparse tensors are not simulated)
        if SIMULATED and "sparse tensors are not simulated" not in _refused_message(lambda: fn(*args, **kwargs, device="cuda")):
            problems.append(f"torch.{name}(..., device='cuda') is not refused in one line")
        continue
    host = fn(*args, **kwargs)
    for form, expected in [(f, 1) for f in GPU1_FORMS] + [(f, 0) for f in CURRENT_FORMS]:
        try:
            out = fn(*args, **kwargs, device=form)
        except Exception as exc:  # noqa: BLE001 - reported with the call
            problems.append(f"torch.{name}(..., device={form!r}): {type(exc).__name__}: {exc}")
            continue
        if out.device != torch.device("cuda", expected) or out.dtype != host.dtype or out.shape != host.shape:
            problems.append(f"torch.{name}(..., device={form!r}): {out.device} {out.dtype} {tuple(out.shape)}, "
                            f"expected cuda:{expected} {host.dtype} {tuple(host.shape)}")
        elif name in DETERMINISTIC and out.layout == torch.strided and not torch.equal(out.cpu(), host):
            problems.append(f"torch.{name}(..., device={form!r}): other values than on the host")

if "--reference" in sys.argv:
    with open(sys.argv[sys.argv.index("--reference") + 1]) as f:
        for name, expected in json.load(f)["fingerprints"].items():
            if name in fingerprints and fingerprints[name] != expected:
                problems.append(f"{name}: CUDA gave {expected}, simulated {fingerprints[name]}")
for problem in problems:
    print("PROBLEM", problem)
print(f"device arguments: {len(surface.device_factories())} factories, {len(surface.device_or_dtype_tensor_methods())} "
      f"Tensor methods, {len(surface.module_device_methods())} Module methods, {len(problems)} problems")
if problems:
    sys.exit(1)
print("OK device_arguments")

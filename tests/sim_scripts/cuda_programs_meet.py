"""Run under `simgpu run --gpus 2`: the torch/CUDA APIs public training code was seen to stop at
(issue 26's items, issue 27's R1/R3/R5), each as such a program calls it."""
import io
import pickle

import torch
import torch.nn as nn

# a model-parallel RNG tracker seeds every GPU's default generator (Megatron's pattern)
assert len(torch.cuda.default_generators) == torch.cuda.device_count() == 2
for index, generator in enumerate(torch.cuda.default_generators):
    generator.manual_seed(100 + index)
    assert generator.initial_seed() == 100 + index and generator.device == torch.device("cuda", index)

# torch.cuda.random's own functions (it keeps its own references to current_device and _lazy_init)
import torch.cuda.random  # noqa: E402

torch.cuda.random.manual_seed(3)
state = torch.cuda.random.get_rng_state()
assert state.dtype == torch.uint8 and state.numel() == 16
first = torch.rand(4, device="cuda")
torch.cuda.random.set_rng_state(state)
assert torch.equal(torch.rand(4, device="cuda"), first)

# a checkpoint stores every GPU's random state; a resumed run with dropout repeats the uninterrupted one
model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 1)).cuda()
x = torch.randn(16, 8, device="cuda")
torch.cuda.manual_seed_all(0)
model(x)
saved = torch.cuda.random.get_rng_state_all()
assert len(saved) == 2
uninterrupted = model(x)
torch.cuda.random.manual_seed_all(99)
torch.cuda.random.set_rng_state_all(saved)
assert torch.equal(model(x), uninterrupted)

# Module.to(dtype) converts the parameters (it calls Tensor.to(None, dtype))
half = nn.Linear(4, 4).cuda().to(torch.bfloat16)
assert half.weight.dtype == torch.bfloat16 and half.weight.device == torch.device("cuda:0")
assert torch.ones(2, device="cuda").to(None, torch.float16).dtype == torch.float16

# the host copy of a functional collective's result is on the host (AsyncCollectiveTensor)
from torch.distributed._functional_collectives import AsyncCollectiveTensor  # noqa: E402

act = AsyncCollectiveTensor(torch.ones(3, device="cuda:1"))
for copy in (act.cpu(), act.detach().cpu(), act.to("cpu")):
    assert copy.device == torch.device("cpu"), copy.device
    assert torch.equal(copy - torch.ones(3), torch.zeros(3))

# classes stay classes: a library annotates with them at import
annotation = torch.cuda.MemPool | None
try:
    torch.cuda.MemPool()
    raise AssertionError("a CUDA memory pool was made on a simulated GPU")
except RuntimeError as exc:
    assert "torch.cuda.MemPool cannot run on simulated GPUs" in str(exc), exc

# factories with pin_memory=True (a safetensors loader for device="cuda:0")
pinned = torch.empty(3, pin_memory=True)
assert pinned.is_pinned() and pinned.device == torch.device("cpu")
assert torch.zeros(2, 2, pin_memory=True).is_pinned()

# libraries branch on the CUDA version
assert torch.version.cuda is not None and torch.backends.cuda.is_built()

# RNG state inside a FakeTensorMode (what LocalTensorMode and DTensor's RNG tracker do)
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

real_state = torch.cuda.get_rng_state()
with FakeTensorMode():
    inside = torch.cuda.get_rng_state()
    torch.cuda.set_rng_state(real_state)
assert type(inside) is torch.Tensor and inside.numel() == 16

# fake tensors of GPU tensors (memory planning, DTensor under FakeTensorMode): on the GPU, as on CUDA,
# through autograd, with no memory and without reaching a CUDA runtime (issue 27, R4: the CPU wheel aborted)
real_w, real_x = torch.randn(3, 8, device="cuda:1", requires_grad=True), torch.randn(4, 8, device="cuda:1")
held = torch.cuda.memory_allocated(1)
fake_mode = FakeTensorMode()
with fake_mode:
    fw, fx = fake_mode.from_tensor(real_w), fake_mode.from_tensor(real_x)
    (fx @ fw.t()).sum().backward()
    assert fw.device == torch.device("cuda:1") and fw.is_cuda and fw.get_device() == 1
    # their legacy type names are CUDA's, and type_as keeps the GPU: DTensor's sharding propagation of
    # dropout's backward (grad * mask.type_as(grad) * scale) on fakes (test_tp_style.py::test_sequence_parallel_style)
    mask = torch.empty_strided((4, 8), (8, 1), dtype=torch.bool, device="cuda:1")
    assert fx.type() == "torch.cuda.FloatTensor" and mask.type() == "torch.cuda.BoolTensor", (fx.type(), mask.type())
    assert mask.type_as(fx).device == torch.device("cuda:1") and mask.type_as(fx).dtype == torch.float32
    assert torch.ops.aten.native_dropout_backward(fx, mask, 2.0).device == torch.device("cuda:1")
assert torch.cuda.memory_allocated(1) == held, (held, torch.cuda.memory_allocated(1))
# a FakeTensor on a GPU first makes a real tensor there (fake_tensor.init_gpu_context; torch 2.11 does it for
# every fake GPU device): under simulation that is the simulated GPU's business, and no tensor is made (on a
# CUDA build of torch 2.11 the real one reached the CUDA runtime: "No CUDA GPUs are available", 10 of
# PyTorch's own DTensor/FSDP2 tests on the GPU box)
from torch._subclasses import fake_tensor  # noqa: E402

assert hasattr(fake_tensor.init_gpu_context, "_simgpu_original")  # torch 2.13's own skips it (a device == str compare)
real_empty, torch.empty = torch.empty, None  # any tensor made now fails
try:
    fake_tensor.init_gpu_context(torch.device("cuda", 1))
finally:
    torch.empty = real_empty

# a generator of a GPU pickles as torch.Generator, as CUDA's does, and comes back with its state
g = torch.Generator(device="cuda:1").manual_seed(5)
torch.randn(3, device="cuda:1", generator=g)
blob = pickle.dumps(g)
assert b"simgpu" not in blob
back = pickle.loads(blob)
assert back.device == torch.device("cuda:1") and torch.equal(back.get_state(), g.get_state())

# checkpoints name no simgpu module, so they load with weights_only=True and where simgpu is absent
buffer = io.BytesIO()
torch.save({"w": torch.ones(2, device="cuda:1"), "where": torch.device("cuda", 1), "rng": torch.cuda.get_rng_state_all()},
           buffer)
assert b"simgpu" not in buffer.getvalue()
buffer.seek(0)
loaded = torch.load(buffer, weights_only=True)
assert loaded["w"].device == torch.device("cuda:1") and loaded["where"] == torch.device("cuda:1")

# a CUDA extension built at run time (DeepSpeed's FusedAdam, apex) is refused in one line, not torch's CUDA_HOME error
from torch.utils.cpp_extension import load_inline  # noqa: E402

try:
    load_inline("kernel", cpp_sources="", cuda_sources="__global__ void f() {}", functions=[])
    raise AssertionError("a CUDA extension was built on simulated GPUs")
except RuntimeError as exc:
    assert "torch.utils.cpp_extension.load_inline of CUDA code cannot run on simulated GPUs" in str(exc), exc

# functorch's wrappers report the GPU of the tensor they wrap (vmap inside create_block_mask and torch.func)
x = torch.ones(2, 3, device="cuda")
assert torch.vmap(lambda r: r + torch.ones(3, device=r.device))(x).device == torch.device("cuda:0")
assert torch.vmap(lambda r: r.to("cuda"))(x).device == torch.device("cuda:0")
# split points given as a host tensor, as CUDA requires them
assert torch.tensor_split(torch.arange(6.0, device="cuda"), torch.tensor([2]))[1].device == torch.device("cuda:0")
# index_put (out of place, and under vmap) takes host indices, as CUDA does
where = torch.tensor([0, 2])
assert torch.zeros(5, device="cuda").index_put((where,), torch.ones(2, device="cuda")).tolist() == [1, 0, 1, 0, 0]
assert torch.index_put(torch.zeros(5, device="cuda"), (where,), torch.ones(2, device="cuda")).is_cuda
batched = torch.vmap(lambda r: r.index_put((where,), torch.ones(2, device="cuda")))(torch.zeros(3, 5, device="cuda"))
assert batched.is_cuda and batched.sum().item() == 6
# sparse tensors are not simulated: converting a GPU tensor is refused in one line, not made on the host
try:
    torch.ones(2, 2, device="cuda").to_sparse()
    raise AssertionError("a sparse tensor was made from a simulated GPU tensor")
except RuntimeError as exc:
    assert "sparse tensors are not simulated" in str(exc), exc
# under inference_mode torch hands composite ops (nn.Linear's aten.linear) to the simulation whole: their
# parts must still run as on CUDA, charging the cuBLAS workspace of a stream's first matmul
with torch.cuda.stream(torch.cuda.Stream()), torch.inference_mode():
    before = torch.cuda.memory_allocated()
    torch.nn.Linear(8, 8, device="cuda")(torch.ones(2, 8, device="cuda"))
    assert torch.cuda.memory_allocated() - before >= 32 << 20, torch.cuda.memory_allocated() - before
# a traced graph with a device argument runs: torch.fx writes `device(...)` and imports torch's device class
# only where that class is torch.device, which simgpu replaces (every make_fx graph with a factory failed:
# "NameError: name 'device' is not defined")
from torch.fx.experimental.proxy_tensor import make_fx

traced = make_fx(lambda t: t + torch.ones(2, device=t.device))(torch.zeros(2))
assert "device(type='cpu')" in traced.code and traced(torch.ones(2)).tolist() == [2.0, 2.0]
assert torch.device == type(torch.device("cpu")) and hash(torch.device) == hash(type(torch.device("cpu")))
# factories inside FakeTensorMode with a GPU device make fakes on that GPU, as on CUDA, through autograd, with
# no memory; a graph traced with a GPU factory keeps the GPU when it runs (flex attention's backward traces so)
held = torch.cuda.memory_allocated(0)
with FakeTensorMode():
    made = torch.randn(4, 8, device="cuda", requires_grad=True)
    layer = torch.nn.Linear(8, 3, device="cuda:1")
    layer(made.to("cuda:1")).sum().backward()
    assert made.device == torch.device("cuda:0") and made.is_cuda and made.grad.device == torch.device("cuda:0")
    assert layer.weight.grad.device == torch.device("cuda:1") and torch.ones(2).device == torch.device("cpu")
assert torch.cuda.memory_allocated(0) == held
on_gpu = make_fx(lambda t: t + torch.ones(2, device=t.device))(torch.zeros(2, device="cuda:1"))
assert "device(type='cuda', index=1)" in on_gpu.code, on_gpu.code
assert on_gpu(torch.ones(2, device="cuda:1")).device == torch.device("cuda:1")
print("OK cuda_programs_meet")

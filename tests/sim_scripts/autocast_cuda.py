"""Run under `simgpu run --gpus 2`: torch.autocast("cuda") casts as CUDA's autocast does (its op lists in
aten/src/ATen/autocast_mode.cpp), in every spelling, with the casts recorded by autograd."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
lin = torch.nn.Linear(8, 4).to("cuda:1")
x = torch.randn(3, 8, device="cuda:1")
target = torch.tensor([0, 1, 3], device="cuda:1")

with torch.autocast("cuda", dtype=torch.bfloat16):
    assert torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16
    y = lin(x)                                               # lower_precision_fp: linear
    assert y.dtype == torch.bfloat16 and y.device == torch.device("cuda:1"), (y.dtype, y.device)
    w = torch.randn(8, 8, device="cuda:1", dtype=torch.bfloat16)
    assert torch.mm(x, w).dtype == torch.bfloat16             # fp32 @ bf16: CUDA casts, no "same dtype" error
    assert F.softmax(y, -1).dtype == torch.float32            # fp32_set_opt_dtype
    assert F.softmax(y, -1, dtype=torch.float64).dtype == torch.float64   # ...unless the call names one
    assert y.sum().dtype == torch.float32 and y.exp().dtype == torch.float32   # fp32
    assert y.norm().dtype == torch.float32                    # fp32_append_dtype
    assert torch.addcmul(y, y.float(), y).dtype == torch.float32   # promote: the widest
    assert (y + y).dtype == torch.bfloat16                    # not listed: as it comes
    loss = F.cross_entropy(y, target)                         # log_softmax inside a C++ composite: fp32
    assert loss.dtype == torch.float32, loss.dtype
    host = torch.ones(2, 2) @ torch.ones(2, 2)                # host tensors are not CUDA autocast's
    assert host.dtype == torch.float32
    try:
        F.binary_cross_entropy(torch.sigmoid(y), torch.rand_like(y))
        raise AssertionError("binary_cross_entropy is banned under CUDA autocast")
    except RuntimeError as exc:
        assert "unsafe to autocast" in str(exc)
    with torch.autocast("cuda", enabled=False):               # nested off
        assert lin(x).dtype == torch.float32 and not torch.is_autocast_enabled("cuda")
    assert lin(x).dtype == torch.bfloat16                     # and back on
    a, b = lin(x), lin(x)                                     # cache: the fp32 weight is cast once per region
    assert a.grad_fn.next_functions[2][0].next_functions[0][0] is b.grad_fn.next_functions[2][0].next_functions[0][0]
loss.backward()                                               # the casts are recorded: fp32 grads on the GPU
assert lin.weight.grad.dtype == torch.float32 and lin.weight.grad.device == torch.device("cuda:1")
assert not torch.is_autocast_enabled("cuda") and lin(x).dtype == torch.float32

with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
    a, b = lin(x), lin(x)
    assert a.grad_fn.next_functions[2][0].next_functions[0][0] is not b.grad_fn.next_functions[2][0].next_functions[0][0]
with torch.cuda.amp.autocast():                               # the legacy spelling: float16 by default
    assert lin(x).dtype == torch.float16 and torch.get_autocast_dtype("cuda") == torch.float16
with torch.amp.autocast("cuda", dtype=torch.bfloat16):
    assert lin(x).dtype == torch.bfloat16


@torch.autocast("cuda", dtype=torch.bfloat16)
def forward(t):
    return lin(t)


assert forward(x).dtype == torch.bfloat16
assert torch.get_autocast_dtype("cuda") == torch.float16      # CUDA's default outside any region

# GradScaler with float16 autocast: a training step on the simulated GPU
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("cuda:1")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
before = [p.detach().clone() for p in model.parameters()]
for _ in range(2):
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(x)
        assert out.dtype == torch.float16
        step_loss = F.cross_entropy(out, target)
    scaler.scale(step_loss).backward()
    scaler.step(opt)
    scaler.update()
assert all(p.grad.dtype == torch.float32 and p.device == torch.device("cuda:1") for p in model.parameters())
assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before)), "the step changed nothing"
assert scaler.get_scale() > 0 and scaler._scale.device == torch.device("cuda:1")
print("OK autocast_cuda")

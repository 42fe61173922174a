"""Run under `simgpu run --gpus 1`: float32 matmuls on a simulated GPU under TF32 (simgpu/cuda_sim/tf32_kernels.py).
With TF32 off (torch's default) a GPU matmul equals the host's float32 one exactly; with it on, whichever API set
it, mm/bmm/baddbmm/addmm/nn.Linear equal float64's product of the operands rounded to TF32 (round-to-nearest-even)
within float32 accumulation, and differ from float32's by far more, as an H200 does
(benchmarks/cuda_references/tf32_probe.py); the bias is added unrounded; inf and NaN stay; bf16 autocast and
convolutions are untouched."""
import torch
import torch.nn.functional as F

from simgpu.cuda_sim.tf32_kernels import enabled, round_to_tf32 as rne

gpu = torch.device("cuda:0")
m = torch.backends.cuda.matmul
torch.manual_seed(0)
a, b = torch.randn(64, 256), torch.randn(256, 48)
a3, b3, c3 = torch.randn(3, 32, 128), torch.randn(3, 128, 16), torch.randn(3, 32, 16)
bias = torch.randn(48) * 100  # large: rounding it to TF32 would show
conv_x, conv_w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.cpu().double() - want.double()).abs().max() / want.double().abs().max()).item()


def check_tf32(setting: str) -> None:
    assert enabled(), setting
    mm = a.to(gpu) @ b.to(gpu)
    assert mm.device == gpu and mm.dtype == torch.float32
    assert rel(mm, rne(a).double() @ rne(b).double()) < 1e-6, (setting, rel(mm, rne(a).double() @ rne(b).double()))
    assert rel(mm, a.double() @ b.double()) > 1e-5, (setting, rel(mm, a.double() @ b.double()))
    bmm = torch.bmm(a3.to(gpu), b3.to(gpu))
    assert rel(bmm, rne(a3).double() @ rne(b3).double()) < 1e-6, setting
    assert rel(bmm, a3.double() @ b3.double()) > 1e-5, setting
    bad = torch.baddbmm(c3.to(gpu), a3.to(gpu), b3.to(gpu), beta=0.5)
    assert rel(bad, 0.5 * c3.double() + rne(a3).double() @ rne(b3).double()) < 1e-6, setting
    addmm = torch.addmm(bias.to(gpu), a.to(gpu), b.to(gpu))
    assert rel(addmm, bias.double() + rne(a).double() @ rne(b).double()) < 1e-6, setting
    assert rel(addmm, rne(bias).double() + rne(a).double() @ rne(b).double()) > 1e-6, setting  # bias in float32
    # nn.Linear: forward (addmm) and backward (mm) on a 3-D input
    lin = torch.nn.Linear(256, 48)
    x = torch.randn(2, 5, 256)
    lin_gpu = torch.nn.Linear(256, 48).to(gpu)
    lin_gpu.load_state_dict(lin.state_dict())
    xg = x.to(gpu).requires_grad_()
    y = lin_gpu(xg)
    want = rne(x).double() @ rne(lin.weight.detach()).double().t() + lin.bias.detach().double()
    assert rel(y, want) < 1e-6 and rel(y, x.double() @ lin.weight.detach().double().t()) > 1e-5, setting
    y.backward(torch.ones_like(y))
    grad_want = torch.ones(2, 5, 48).double() @ rne(lin.weight.detach()).double()  # ones are TF32 already
    assert rel(xg.grad, grad_want) < 1e-6, setting
    # inf and NaN stay what float32 makes of them
    special = a.clone()
    special[0, 0], special[1, 0] = float("inf"), float("nan")
    out = (special.to(gpu) @ b.abs().to(gpu)).cpu()
    assert torch.isinf(out[0]).all() and (out[0] > 0).all() and torch.isnan(out[1]).all(), out[:2, :4]
    assert torch.isfinite(out[2:]).all()
    # bf16 autocast casts before the matmul: TF32 changes nothing there
    with torch.autocast("cuda", dtype=torch.bfloat16):
        cast = a.to(gpu) @ b.to(gpu)
    assert cast.dtype == torch.bfloat16 and torch.equal(cast.cpu(), a.bfloat16() @ b.bfloat16()), setting
    # convolutions are not rounded (cuDNN chooses TF32 per algorithm: the probe's case gave float32 accuracy)
    assert torch.equal(F.conv2d(conv_x.to(gpu), conv_w.to(gpu)).cpu(), F.conv2d(conv_x, conv_w)), setting


# TF32 off (the default): the host's float32 kernel, bit for bit
assert not enabled()
assert torch.equal((a.to(gpu) @ b.to(gpu)).cpu(), a @ b)
assert torch.equal(torch.bmm(a3.to(gpu), b3.to(gpu)).cpu(), torch.bmm(a3, b3))
lin = torch.nn.Linear(256, 48)
x = torch.randn(2, 5, 256)
assert torch.equal(lin.to(gpu)(x.to(gpu)).cpu(), lin.cpu()(x))

m.allow_tf32 = True
check_tf32("allow_tf32")
m.allow_tf32 = False
assert not enabled() and torch.equal((a.to(gpu) @ b.to(gpu)).cpu(), a @ b)
for precision in ("high", "medium"):
    torch.set_float32_matmul_precision(precision)
    check_tf32(f"set_float32_matmul_precision({precision!r})")
torch.set_float32_matmul_precision("highest")
assert not enabled() and torch.equal((a.to(gpu) @ b.to(gpu)).cpu(), a @ b)
if hasattr(torch._C, "_get_fp32_precision_getter"):  # the new API (torch 2.9 on); legacy getters refuse after it
    m.fp32_precision = "tf32"
    check_tf32("matmul.fp32_precision = 'tf32'")
    m.fp32_precision = "ieee"
    assert not enabled() and torch.equal((a.to(gpu) @ b.to(gpu)).cpu(), a @ b)
    torch.backends.fp32_precision = "tf32"  # inherited by cuda matmul, whose own setting says "none"
    m.fp32_precision = "none"
    check_tf32("backends.fp32_precision = 'tf32'")
print("OK tf32_matmul")

"""Run under `simgpu run --gpus 2`: ops whose CUDA kernels give other dtypes, shapes or answers than the host's,
found by the every-sample OpInfo sweep on a GPU box (issue 26). Each check fails without its fix:
- batch/layer norm of half inputs keep their statistics in float32, batch norm in evaluation returns them
  (norm_kernels.py), and training through nn.LayerNorm / nn.BatchNorm in float16/bfloat16 still works;
- LU without pivoting (linalg_kernels.py), which the host refuses;
- trace is CUDA's diagonal().sum(), so CUDA autocast gives float32 (half_kernels.py);
- integer remainder/fmod by zero gives what an H200 gives (all ones; int64: 0xFFFFFFFF or -1), where the host
  raises (half_kernels.py);
- float16 rrelu, its noise drawn from the GPU's generator (half_kernels.py)."""
import torch
import torch.nn.functional as F

aten = torch.ops.aten
gpu = torch.device("cuda:1")
torch.manual_seed(0)


def close(a, b, **tol):
    torch.testing.assert_close(a.detach().cpu().double(), b.detach().cpu().double(), **tol)


# ---- layer norm: float32 statistics, the output computed wide and rounded once ------------------------
for dtype in (torch.float16, torch.bfloat16):
    x = torch.randn(4, 6, dtype=dtype)
    w, b = torch.randn(6, dtype=dtype), torch.randn(6, dtype=dtype)
    out, mean, rstd = aten.native_layer_norm(x.to(gpu), [6], w.to(gpu), b.to(gpu), 1e-5)
    assert (out.dtype, mean.dtype, rstd.dtype) == (dtype, torch.float32, torch.float32), (out.dtype, mean.dtype)
    assert out.device == mean.device == rstd.device == gpu and mean.shape == (4, 1)
    ref = F.layer_norm(x.double(), [6], w.double(), b.double(), 1e-5)
    assert torch.equal(out.cpu(), ref.to(dtype)) or (out.cpu().double() - ref).abs().max() <= ref.abs().max() * 2 ** -7
    close(mean, x.double().mean(-1, keepdim=True), atol=1e-6, rtol=1e-6)

    # training through the module: gradients in the parameters' dtype, close to float64's
    ln = torch.nn.LayerNorm(6).to(gpu, dtype)
    xg = x.to(gpu).requires_grad_()
    (ln(xg).float() * torch.arange(6.0, device=gpu)).sum().backward()
    host_ln = torch.nn.LayerNorm(6).double()
    xh = x.double().requires_grad_()
    (host_ln(xh) * torch.arange(6.0)).sum().backward()
    assert xg.grad.dtype == dtype and ln.weight.grad.dtype == dtype and xg.grad.device == gpu
    close(xg.grad, xh.grad, atol=5e-2, rtol=5e-2)
    close(ln.weight.grad, host_ln.weight.grad, atol=5e-2, rtol=5e-2)

# ---- batch norm: float32 statistics in training; running statistics in evaluation, for every dtype ----
for dtype in (torch.float16, torch.bfloat16, torch.float32):
    half = dtype != torch.float32
    acc = torch.float32 if half else dtype
    x = torch.randn(8, 3, 5, dtype=dtype)
    bn = torch.nn.BatchNorm1d(3).to(gpu, dtype)
    out, save_mean, save_invstd = aten.native_batch_norm(x.to(gpu), bn.weight, bn.bias, bn.running_mean,
                                                         bn.running_var, True, 0.1, 1e-5)
    assert (out.dtype, save_mean.dtype, save_invstd.dtype) == (dtype, acc, acc), (dtype, save_mean.dtype)
    close(save_mean, x.double().mean((0, 2)), atol=1e-3, rtol=1e-3)
    assert bn.running_mean.dtype == dtype and bn.running_mean.device == gpu
    close(bn.running_mean, 0.1 * x.double().mean((0, 2)), atol=1e-2, rtol=1e-2)  # updated in place

    rm, rv = torch.randn(3, dtype=dtype).to(gpu), torch.rand(3, dtype=dtype).to(gpu) + 0.5
    out, save_mean, save_invstd = aten.native_batch_norm(x.to(gpu), None, None, rm, rv, False, 0.1, 1e-5)
    assert save_mean.shape == save_invstd.shape == (3,) and save_mean.dtype == acc, (save_mean.shape, dtype)
    assert torch.equal(save_mean.cpu(), rm.cpu().to(acc)) and save_mean.data_ptr() != rm.data_ptr()
    close(save_invstd, torch.rsqrt(rv.cpu().to(acc) + 1e-5), atol=0, rtol=0)
    outs = aten._batch_norm_with_update(x.to(gpu), None, None, rm, rv, 0.1, 1e-5)
    assert [t.dtype for t in outs] == [dtype, acc, acc, torch.uint8] and outs[3].shape == (0,)

    # training and evaluation through the module with autograd, against float64
    for train in (True, False):
        bn = torch.nn.BatchNorm1d(3).to(gpu, dtype).train(train)
        host = torch.nn.BatchNorm1d(3).double().train(train)
        xg, xh = x.to(gpu).requires_grad_(), x.double().requires_grad_()
        weights = torch.linspace(-1, 1, 15).reshape(3, 5)
        (bn(xg).float() * weights.to(gpu)).sum().backward()
        (host(xh) * weights.double()).sum().backward()
        assert xg.grad.dtype == dtype and bn.weight.grad.dtype == dtype and bn.weight.grad.device == gpu
        close(xg.grad, xh.grad, atol=5e-2, rtol=5e-2)
        close(bn.weight.grad, host.weight.grad, atol=5e-2, rtol=5e-2)
        close(bn.running_var, host.running_var, atol=2e-2, rtol=2e-2)

# ---- LU without pivoting -------------------------------------------------------------------------------
A = torch.randn(2, 4, 4, dtype=torch.float64) + 8 * torch.eye(4, dtype=torch.float64)  # no row exchanges needed
P, L, U = torch.linalg.lu(A.to(gpu), pivot=False)
assert P.shape == (0,) and P.device == L.device == U.device == gpu
assert torch.equal(L.diagonal(dim1=-2, dim2=-1).cpu(), torch.ones(2, 4, dtype=torch.float64))
assert torch.equal(L.cpu(), L.cpu().tril()) and torch.equal(U.cpu(), U.cpu().triu())
close(L @ U, A, atol=1e-12, rtol=0)
Ph, Lh, Uh = torch.linalg.lu(A)  # partial pivoting: no exchanges for a diagonally dominant matrix, same factors
assert torch.equal(Ph, torch.eye(4, dtype=torch.float64).expand(2, 4, 4))
close(L, Lh, atol=1e-12, rtol=0)
close(U, Uh, atol=1e-12, rtol=0)
LU, pivots = torch.linalg.lu_factor(A.to(gpu), pivot=False)
assert pivots.dtype == torch.int32 and torch.equal(pivots.cpu(), torch.tensor([[1, 2, 3, 4]] * 2, dtype=torch.int32))
assert LU.mT.is_contiguous()  # column-major, as cuSOLVER writes it
wide = torch.randn(3, 5, device=gpu)
P, L, U = torch.linalg.lu(wide, pivot=False)
assert L.shape == (3, 3) and U.shape == (3, 5)
close(L @ U, wide, atol=1e-4, rtol=1e-4)
# gradients: as the host's for the same factors
Ag, Ah = A.to(gpu).requires_grad_(), A.clone().requires_grad_()
_, L, U = torch.linalg.lu(Ag, pivot=False)
_, Lh, Uh = torch.linalg.lu(Ah)
(L.sum() + (U * U).sum()).backward()
(Lh.sum() + (Uh * Uh).sum()).backward()
close(Ag.grad, Ah.grad, atol=1e-9, rtol=1e-9)
# a zero pivot: lu_factor_ex reports it (1-based), lu_factor raises torch's error
_, _, info = torch.linalg.lu_factor_ex(torch.zeros(3, 3, device=gpu), pivot=False)
assert info.item() == 1, info
try:
    torch.linalg.lu_factor(torch.tensor([[0.0, 1.0], [1.0, 0.0]], device=gpu), pivot=False)
except RuntimeError as e:
    assert "U[1,1] is zero" in str(e), e
else:
    raise AssertionError("lu_factor without pivoting of a matrix with a zero pivot did not raise")
try:
    torch.linalg.lu(torch.randn(3, 3), pivot=False)  # the host stays the host
except RuntimeError as e:
    assert "not implemented on the CPU" in str(e), e
else:
    raise AssertionError("LU without pivoting ran on the host, which torch's CPU build cannot do")

# ---- trace: diagonal().sum(), as CUDA's kernel ------------------------------------------------------------
m = torch.randn(4, 4)
for dtype in (torch.float16, torch.bfloat16, torch.bool, torch.complex32, torch.int16):
    t = (m > 0) if dtype == torch.bool else m.to(dtype)
    got = torch.trace(t.to(gpu))
    want = t.to(torch.complex64 if dtype == torch.complex32 else t.dtype).diagonal().sum()
    assert got.dtype == want.to(got.dtype).dtype and got.device == gpu
    close(got.to(torch.complex64) if dtype == torch.complex32 else got, want, atol=1e-2, rtol=1e-2)
with torch.autocast("cuda", dtype=torch.bfloat16):
    assert torch.trace(m.to(gpu, torch.bfloat16)).dtype == torch.float32
    assert torch.trace(m.to(gpu, torch.float16)).dtype == torch.float32
    assert torch.trace(m.to(gpu, torch.float64)).dtype == torch.float64
assert torch.trace(m.to(gpu, torch.bfloat16)).dtype == torch.bfloat16

# ---- integer remainder and fmod by zero: an H200's answers, no ZeroDivisionError ---------------------------
divisor = torch.tensor([0, 3, -3, 0], dtype=torch.int32)
dividend = torch.tensor([7, -7, 7, -5], dtype=torch.int32)
assert torch.equal((dividend.to(gpu) % divisor.to(gpu)).cpu(), torch.tensor([-1, 2, -2, -1], dtype=torch.int32))
assert torch.equal(torch.fmod(dividend.to(gpu), divisor.to(gpu)).cpu(), torch.tensor([-1, -1, 1, -1], dtype=torch.int32))
assert torch.equal((5 % divisor.to(gpu, torch.int8)).cpu(), torch.tensor([-1, 2, -1, -1], dtype=torch.int8))
assert torch.equal((5 % divisor.to(gpu, torch.uint8)).cpu(), torch.tensor([255, 2, 5, 255], dtype=torch.uint8))
assert torch.equal(torch.remainder(dividend.to(gpu, torch.int64), 0).cpu(),
                   torch.tensor([0xFFFFFFFF, -1, 0xFFFFFFFF, -1], dtype=torch.int64))
try:
    dividend % divisor  # the host raises, as torch's CPU kernel does
except RuntimeError as e:
    assert "ZeroDivisionError" in str(e), e
else:
    raise AssertionError("integer remainder by zero on the host did not raise")

# ---- rrelu in float16: noise written back, drawn from the GPU's generator ---------------------------------
x = torch.randn(64, dtype=torch.float16).to(gpu)
host_state = torch.get_rng_state()
torch.cuda.manual_seed_all(3)
first = F.rrelu(x, 0.1, 0.3, training=True)
torch.cuda.manual_seed_all(3)
again = F.rrelu(x, 0.1, 0.3, training=True)
assert first.dtype == torch.float16 and first.device == x.device and torch.equal(first.cpu(), again.cpu())
assert torch.equal(torch.get_rng_state(), host_state), "rrelu on a GPU drew from the host's generator"
state = torch.cuda.get_rng_state(gpu)
F.rrelu(x, 0.1, 0.3, training=False)
assert torch.equal(torch.cuda.get_rng_state(gpu), state), "rrelu in evaluation advanced the GPU's generator"
noise = torch.empty_like(x)
out = aten.rrelu_with_noise(x, noise, 0.1, 0.3, True)
negative = x.cpu() < 0
slopes = noise.cpu()[negative].float()
assert bool(((slopes >= 0.1 - 1e-3) & (slopes <= 0.3 + 1e-3)).all()) and torch.equal(noise.cpu()[~negative], torch.ones_like(noise.cpu()[~negative]))
close(out.cpu()[negative], (x.cpu().float() * noise.cpu().float())[negative], atol=1e-3, rtol=1e-2)

print("OK cuda_op_layer")

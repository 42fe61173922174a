"""Run under `simgpu run --gpus 2`: half precision where CUDA has kernels the host lacks. torch.fft in
float16 / complex32 as cuFFT computes it (half_fft.py): the host's FFT refuses half precision, CUDA's
computes it for power-of-two sizes and refuses other sizes with cuFFT's message. complex32 cos/sum/...
and float16 margin losses (half_kernels.py): computed wide and rounded once, as CUDA's opmath does."""
import torch

torch.manual_seed(0)
x = torch.randn(4, 8, device="cuda:1", dtype=torch.float16)
wide = x.cpu().float()
for name, kwargs, expected_dtype in [("fft", {}, torch.complex32), ("rfft", {}, torch.complex32),
                                     ("fft2", {}, torch.complex32), ("rfftn", {}, torch.complex32),
                                     ("ihfft", {}, torch.complex32), ("hfft", {"n": 8}, torch.float16)]:
    fn = getattr(torch.fft, name)
    got = fn(x, **kwargs)
    assert got.device == torch.device("cuda:1") and got.dtype == expected_dtype, (name, got.device, got.dtype)
    want = fn(wide, **kwargs).to(expected_dtype)  # computed wide, rounded once: what cuFFT returns
    assert torch.equal(got.cpu().view(torch.float16) if got.is_complex() else got.cpu(),
                       want.view(torch.float16) if want.is_complex() else want), name

# complex32 in, complex32 out, and back again
c = torch.fft.fft(x)
back = torch.fft.ifft(c)
assert back.dtype == torch.complex32 and back.device == torch.device("cuda:1")
assert torch.allclose(back.to(torch.complex64).real.cpu(), wide, atol=2e-2)
real = torch.fft.irfft(torch.fft.rfft(x), n=8)
assert real.dtype == torch.float16 and torch.allclose(real.cpu().float(), wide, atol=2e-2)

# cuFFT's size rule in half precision: the transformed sizes must be powers of two
for bad in (lambda: torch.fft.fft(torch.randn(6, device="cuda", dtype=torch.float16)),
            lambda: torch.fft.rfft(x, n=6), lambda: torch.fft.irfft(torch.fft.rfft(x), n=6)):
    try:
        bad()
    except RuntimeError as e:
        assert "cuFFT only supports dimensions whose sizes are powers of two when computing in half precision" \
            in str(e), e
    else:
        raise AssertionError("a half-precision FFT of a size that is not a power of two ran")

# gradients flow through the widening and the rounding, in the input's dtype and GPU
leaf = x.clone().requires_grad_()
torch.fft.rfft(leaf).abs().float().sum().backward()
assert leaf.grad.dtype == torch.float16 and leaf.grad.device == torch.device("cuda:1")
host = wide.clone().requires_grad_()
torch.fft.rfft(host).abs().sum().backward()
assert torch.allclose(leaf.grad.cpu().float(), host.grad, atol=5e-2, rtol=1e-2)

# the host stays the host: a float16 FFT of a host tensor is refused as torch refuses it
try:
    torch.fft.fft(x.cpu())
except RuntimeError as e:
    assert "Unsupported dtype Half" in str(e) or "Half" in str(e), e
else:
    raise AssertionError("a float16 FFT ran on the host, which torch's CPU FFT cannot do")

# complex32 and float16 kernels CUDA has and the host lacks: wide, rounded once; others stay refused
z = torch.randn(4, device="cuda:1", dtype=torch.complex64)
for fn in (torch.cos, torch.cosh, torch.acos, torch.acosh, torch.atanh, torch.sum, torch.prod, torch.sigmoid,
           lambda t: t.sum(0), lambda t: t ** 2, lambda t: torch.pow(t, t),
           # found by the every-sample sweep on torch 2.11+cu130 (CUDA runs them, the host refuses)
           torch.sin, torch.sinh, torch.asin, torch.asinh, torch.tan, torch.tanh, torch.atan, torch.exp,
           torch.log, torch.sqrt, torch.rsqrt, lambda t: torch.div(t, t), lambda t: torch.lerp(t, t * 2, 0.25),
           lambda t: torch.logaddexp(t, t)):
    got = fn(z.to(torch.complex32))
    want = fn(z.cpu().to(torch.complex32).to(torch.complex64)).to(torch.complex32)
    assert got.device == torch.device("cuda:1") and got.dtype == torch.complex32, (got.device, got.dtype)
    assert torch.equal(got.cpu().to(torch.complex64), want.to(torch.complex64)), fn
angle = torch.angle(z.to(torch.complex32))  # a real result: float16, as CUDA gives it
assert angle.dtype == torch.float16 and angle.device == torch.device("cuda:1"), (angle.dtype, angle.device)
assert torch.equal(angle.cpu(), torch.angle(z.cpu().to(torch.complex32).to(torch.complex64)).to(torch.float16))
for refused in (lambda: torch.special.erfcx(z.to(torch.complex32)), lambda: torch.cos(z.cpu().to(torch.complex32))):
    try:
        refused()
    except (NotImplementedError, RuntimeError) as e:
        assert "ComplexHalf" in str(e), e
    else:
        raise AssertionError("a complex32 op ran that CUDA (erfcx: no complex kernel) or the host (cos) refuses")
# integer histc (CUDA counts in the input's dtype; the host has no integer kernel), bfloat16 3-D pooling
counts = torch.histc(torch.tensor([1, 2, 2, 7], device="cuda:1", dtype=torch.int16), bins=4, min=0, max=8)
assert counts.dtype == torch.int16 and counts.device == torch.device("cuda:1"), (counts.dtype, counts.device)
assert counts.cpu().tolist() == [1, 2, 0, 1], counts
vol = torch.randn(1, 2, 4, 4, 4, device="cuda:1", dtype=torch.bfloat16)
pooled = torch.nn.functional.avg_pool3d(vol, 2)
assert pooled.dtype == torch.bfloat16 and torch.equal(
    pooled.cpu(), torch.nn.functional.avg_pool3d(vol.cpu().float(), 2).to(torch.bfloat16))
scores = torch.randn(3, 4, device="cuda:1", dtype=torch.float16, requires_grad=True)
loss = torch.nn.functional.multi_margin_loss(scores, torch.tensor([0, 2, 1], device="cuda:1"))
loss.backward()
host_scores = scores.detach().cpu().float().requires_grad_()
host_loss = torch.nn.functional.multi_margin_loss(host_scores, torch.tensor([0, 2, 1]))
host_loss.backward()
assert loss.dtype == torch.float16 and loss.device == torch.device("cuda:1") and scores.grad.dtype == torch.float16
assert loss.item() == host_loss.half().item() and torch.equal(scores.grad.cpu(), host_scores.grad.half())

# dtypes CUDA computes and the host refuses outright: abs of bool (the identity), nansum of complex inputs
# (NaN elements, by their real or imaginary part, count as zero); on the host both stay refused
flags = torch.tensor([[True, False], [False, True]], device="cuda:1")
got = torch.abs(flags)
assert got.device == torch.device("cuda:1") and got.dtype == torch.bool and torch.equal(got.cpu(), flags.cpu())
nan = float("nan")
values = torch.tensor([[1 + 2j, complex(nan, 1)], [3 - 1j, complex(2, nan)]], dtype=torch.complex64)
for dtype in (torch.complex32, torch.complex64, torch.complex128):
    c = values.to(dtype).to("cuda:1")
    for kwargs, want in [({}, [4 + 1j]), ({"dim": 1}, [1 + 2j, 3 - 1j]), ({"dim": 0, "keepdim": True}, [[4 + 1j, 0j]])]:
        got = torch.nansum(c, **kwargs)
        assert got.device == torch.device("cuda:1") and got.dtype == dtype, (dtype, kwargs, got.device, got.dtype)
        want = torch.tensor(want, dtype=torch.complex128).reshape(got.shape)
        torch.testing.assert_close(got.cpu().to(torch.complex128), want)
assert torch.nansum(values.to("cuda:1"), dtype=torch.complex128).dtype == torch.complex128
for refused, words in ((lambda: torch.abs(flags.cpu()), "Bool"), (lambda: torch.nansum(values), "complex")):
    try:
        refused()
    except (RuntimeError, NotImplementedError) as e:
        assert words in str(e), e
    else:
        raise AssertionError("the host ran an op its kernels refuse")
print("OK half_precision")

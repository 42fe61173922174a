"""Run under `simgpu run --gpus 2`: torch.fft in float16 / complex32 on simulated GPUs as cuFFT computes it
(half_fft.py): the host's FFT refuses half precision, CUDA's computes it for power-of-two sizes and
refuses other sizes with cuFFT's message."""
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
print("OK half_precision_fft")

"""RMSNorm on a simulated GPU as CUDA runs it (tests/test_simulated_ops.py): one fused op whose autograd node
saves the input, the weight and rstd, where the host's composite keeps two more tensors of the input's size;
values and gradients torch's own decomposition of the fused op gives (CUDA's reference); host tensors keep
torch's composite. Also runs under a plan (storage-less): the memory figures must be the same."""
import json
import sys

import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table

aten = torch.ops.aten
plan = "--plan" in sys.argv
torch.manual_seed(0)
x = torch.randn(8, 256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
w = torch.randn(512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
before = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
y = F.rms_norm(x, (512,), w, 1e-6)
held = torch.cuda.memory_allocated() - before
peak = torch.cuda.max_memory_allocated() - before
out_bytes = y.numel() * y.element_size()
# the kernel's float32 intermediates are registers on CUDA: not charged, with data or in a plan (there the
# decomposition's own Tensor.to runs inside placement's kernel scope)
assert peak == held, (peak, held)
assert type(y.grad_fn).__name__ == "_FusedRmsNormBackward", y.grad_fn
assert out_bytes < held < out_bytes + 64 * 1024, (held, out_bytes)  # the output and rstd, nothing of x's size
g = torch.randn_like(y)
y.backward(g)
assert x.grad.shape == x.shape and w.grad.shape == w.shape and x.grad.dtype == torch.bfloat16
if not plan:  # values: torch's decomposition of the fused op (float32 inside, one rounding) on host copies
    ref_out, ref_rstd = decomposition_table[aten._fused_rms_norm.default](x.detach().cpu(), [512], w.detach().cpu(), 1e-6)
    ref_gx, ref_gw = decomposition_table[aten._fused_rms_norm_backward.default](
        g.cpu(), x.detach().cpu(), [512], ref_rstd, w.detach().cpu(), [True, True])
    assert torch.equal(y.detach().cpu(), ref_out)
    assert torch.equal(x.grad.cpu(), ref_gx) and torch.equal(w.grad.cpu(), ref_gw)
    host = F.rms_norm(x.detach().cpu().requires_grad_(), (512,), w.detach().cpu(), 1e-6)
    assert type(host.grad_fn).__name__ != "_FusedRmsNormBackward"  # host tensors: torch's composite
with torch.no_grad():
    z = torch.nn.RMSNorm(512, device="cuda", dtype=torch.bfloat16)(x)
out, rstd = aten._fused_rms_norm(x, [512], None, 1e-6)
assert z.device == x.device == rstd.device and z.grad_fn is None and rstd.dtype == torch.float32
print(json.dumps({"held": held, "out_bytes": out_bytes}))
print("OK rms_norm_fused")

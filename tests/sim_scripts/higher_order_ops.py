"""Run under `simgpu run --gpus 2`: activation checkpointing (both modes), torch.cond and while_loop
on a simulated GPU: results and gradients on the GPU, with the host's values, under autocast too."""
import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
host_w = torch.randn(6, 6)


def block(a, w):
    return torch.tanh(a @ w).sin()


for reentrant in (False, True):
    results = {}
    for device in ("cuda:1", "cpu"):
        w = host_w.to(device).detach().clone().requires_grad_()
        x = torch.linspace(-1, 1, 12, device=device).reshape(2, 6).requires_grad_()
        out = checkpoint(block, x, w, use_reentrant=reentrant)
        out.sum().backward()
        results[device] = (out, w.grad, x.grad)
    (out, gw, gx), (h_out, h_gw, h_gx) = results["cuda:1"], results["cpu"]
    assert out.device == gw.device == gx.device == torch.device("cuda:1"), (out.device, gw.device, gx.device)
    for a, b in ((out, h_out), (gw, h_gw), (gx, h_gx)):
        torch.testing.assert_close(a.detach().cpu(), b.detach())

w = host_w.to("cuda:1").requires_grad_()
x = torch.randn(2, 6, device="cuda:1")
with torch.autocast("cuda", dtype=torch.bfloat16):          # recomputation repeats the casts
    out = checkpoint(block, x, w, use_reentrant=False)
    assert out.dtype == torch.bfloat16
out.float().sum().backward()
assert w.grad.dtype == torch.float32 and w.grad.device == torch.device("cuda:1")

y = torch.randn(3, 3, device="cuda:1")
for pred in (True, False):
    got = torch.cond(torch.tensor(pred, device="cuda:1"), lambda a: a @ a.T, lambda a: a * 2, (y,))
    want = y.cpu() @ y.cpu().T if pred else y.cpu() * 2
    assert got.device == torch.device("cuda:1")
    torch.testing.assert_close(got.cpu(), want)
with torch.autocast("cuda", dtype=torch.bfloat16):
    assert torch.cond(y.sum() > -1e9, lambda a: a @ a.T, lambda a: a @ a, (y,)).dtype == torch.bfloat16

from torch._higher_order_ops.while_loop import while_loop  # noqa: E402

i, acc = while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2), (torch.tensor(0, device="cuda:1"), y))
assert i.item() == 3 and acc.device == torch.device("cuda:1")
torch.testing.assert_close(acc.cpu(), y.cpu() * 8)
print("OK higher_order_ops")

"""Run under `simgpu run --gpus 2`: torch.func transforms over GPU tensors, and FlexAttention's eager
path (create_block_mask on "cuda", flex_attention forward and backward) with the host's numbers."""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

# vmap with a GPU tensor captured: functorch's batched tensors are not host tensors
bias = torch.arange(4.0, device="cuda")
out = torch.vmap(lambda row: row * bias + bias)(torch.ones(3, 4, device="cuda"))
assert out.device == torch.device("cuda:0") and out.tolist() == [[0.0, 2.0, 4.0, 6.0]] * 3
g = torch.func.grad(lambda t: (t * bias).sum())(torch.ones(4, device="cuda"))
assert g.device == torch.device("cuda:0") and g.tolist() == bias.tolist()

torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 128, 16) for _ in range(3))
doc = torch.zeros(128, dtype=torch.long)
doc[64:] = 1
doc_gpu = doc.to("cuda")


def mask_mod(b, h, qi, ki):
    return (doc_gpu[qi] == doc_gpu[ki]) & (qi >= ki)


block_mask = create_block_mask(mask_mod, 1, 1, 128, 128, device="cuda")
assert block_mask.kv_num_blocks.device == torch.device("cuda:0")
qg, kg, vg = (t.to("cuda").requires_grad_() for t in (q, k, v))
out = flex_attention(qg, kg, vg, block_mask=block_mask)
out.sum().backward()
assert out.device == torch.device("cuda:0") and qg.grad.device == torch.device("cuda:0")

# the same attention on the host, written out (flex_attention has no backward on CPU)
qh, kh, vh = (t.clone().requires_grad_() for t in (q, k, v))
i = torch.arange(128)
allowed = (doc[i][:, None] == doc[i][None, :]) & (i[:, None] >= i[None, :])
ref = torch.softmax((qh @ kh.transpose(-1, -2) / 4.0).masked_fill(~allowed, float("-inf")), -1) @ vh
ref.sum().backward()
torch.testing.assert_close(out.detach().cpu(), ref.detach())
for sim_t, host_t in ((qg, qh), (kg, kh), (vg, vh)):
    torch.testing.assert_close(sim_t.grad.cpu(), host_t.grad)
with torch.no_grad():   # the forward pass on the host's flex_attention gives the same numbers
    torch.testing.assert_close(out.detach().cpu(), flex_attention(q, k, v, block_mask=create_block_mask(
        lambda b, h, qi, ki: (doc[qi] == doc[ki]) & (qi >= ki), 1, 1, 128, 128, device="cpu")))
print("OK functorch_flex")

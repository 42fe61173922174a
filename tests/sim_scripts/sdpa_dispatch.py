"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: scaled_dot_product_attention on simulated GPUs
takes the kernel CUDA takes (FlashAttention for half precision without a mask, the memory-efficient kernel
for float32 or a mask, the math composite otherwise, as sdpa_kernel allows) through CUDA's ops, with the
host's values and gradients; context parallelism (ring attention over those ops) and head-sharded DTensors
(tensor parallelism) give the full attention's values and gradients."""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import context_parallel_unshard
from torch.nn.attention import SDPBackend, sdpa_kernel

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)
GPU = torch.device("cuda", rank)
TOL = {torch.float32: {}, torch.float64: {}, torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
       torch.float16: dict(atol=3e-3, rtol=3e-3)}


def compare(kwargs, *shapes, dtype, kernel, enable_gqa=False):
    """SDPA on the GPU against the host: the kernel's backward node (the output's, or under the slice that
    undoes FlashAttention's head-dim padding; none for the math composite), values, gradients."""
    torch.manual_seed(0)
    host = [torch.randn(s, dtype=dtype) for s in shapes]
    gpu = [t.to(GPU).requires_grad_() for t in host]
    ref_in = [t.clone().requires_grad_() for t in host]
    extra = {"enable_gqa": True} if enable_gqa else {}
    gpu_kwargs = {name: value.to(GPU) if isinstance(value, torch.Tensor) else value for name, value in kwargs.items()}
    out = F.scaled_dot_product_attention(*gpu, **gpu_kwargs, **extra)
    ref = F.scaled_dot_product_attention(*ref_in, **kwargs, **extra)
    nodes = [type(out.grad_fn).__name__] + [type(f).__name__ for f, _ in out.grad_fn.next_functions if f is not None]
    fused = [n for n in nodes if n.startswith("ScaledDotProduct")]
    assert fused == ([] if kernel == "math" else [kernel]), (nodes, kernel, dtype, shapes)
    grad = torch.randn_like(ref)
    out.backward(grad.to(GPU))
    ref.backward(grad)
    assert out.device == GPU and all(t.grad.device == GPU for t in gpu)
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), **TOL[dtype])
    for a, b in zip(gpu, ref_in):
        torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL[dtype])


B, H, L, D = 2, 4, 24, 16
qkv = [(B, H, L, D)] * 3
compare({"is_causal": True}, *qkv, dtype=torch.bfloat16, kernel="ScaledDotProductFlashAttentionBackward0")
compare({}, *qkv, dtype=torch.float16, kernel="ScaledDotProductFlashAttentionBackward0")
compare({"is_causal": True}, *qkv, dtype=torch.float32, kernel="ScaledDotProductEfficientAttentionBackward0")
compare({"attn_mask": torch.rand(L, L) > 0.3}, *qkv, dtype=torch.float32,
        kernel="ScaledDotProductEfficientAttentionBackward0")
compare({"attn_mask": torch.randn(B, 1, L, L)}, *qkv, dtype=torch.bfloat16,
        kernel="ScaledDotProductEfficientAttentionBackward0")
compare({}, (B, H, L, 12), (B, H, L, 12), (B, H, L, 12), dtype=torch.bfloat16,   # head dim padded to 16
        kernel="ScaledDotProductFlashAttentionBackward0")
compare({"is_causal": True}, (B, 8, L, D), (B, 2, L, D), (B, 2, L, D), dtype=torch.bfloat16, enable_gqa=True,
        kernel="ScaledDotProductFlashAttentionBackward0")
compare({"is_causal": True}, (B, 8, L, D), (B, 2, L, D), (B, 2, L, D), dtype=torch.float32, enable_gqa=True,
        kernel="ScaledDotProductEfficientAttentionBackward0")
compare({"is_causal": True}, (B, H, 8, D), (B, H, L, D), (B, H, L, D), dtype=torch.bfloat16,   # causal, q != k
        kernel="ScaledDotProductEfficientAttentionBackward0")
compare({}, *qkv, dtype=torch.float64, kernel="math")   # no fused kernel for float64: math
compare({}, (B, L, D), (B, L, D), (B, L, D), dtype=torch.float32, kernel="math")  # 3-D: math
with sdpa_kernel(SDPBackend.MATH):
    compare({"is_causal": True}, *qkv, dtype=torch.bfloat16, kernel="math")

q = torch.randn(B, H, L, D, device=GPU)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # float32 and flash only: CUDA has no kernel for it
    try:
        F.scaled_dot_product_attention(q, q, q)
        raise AssertionError("flash-only float32 attention ran")
    except RuntimeError as e:
        assert "No available kernel" in str(e), e
half = q.to(torch.bfloat16)
assert torch._fused_sdp_choice(half, half, half) == SDPBackend.FLASH_ATTENTION.value
assert torch._fused_sdp_choice(q, q, q) == SDPBackend.EFFICIENT_ATTENTION.value
params = torch.backends.cuda.SDPAParams(half, half, half, None, 0.0, False, False)
assert torch.backends.cuda.can_use_flash_attention(params) and torch.backends.cuda.can_use_efficient_attention(params)
assert not torch.backends.cuda.can_use_flash_attention(torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, False, False))

# dropout: the backward draws the forward's mask again (gradcheck re-seeds the GPU before every call)
leaf = torch.randn(1, 2, 8, 8, device=GPU, dtype=torch.float64)


def dropped(a):
    torch.cuda.manual_seed(1)
    return torch.ops.aten._scaled_dot_product_efficient_attention(a, a, a, None, True, 0.3)[0]


assert torch.autograd.gradcheck(dropped, (leaf.float().requires_grad_(),), eps=1e-2, atol=2e-2, rtol=2e-2)
torch.cuda.manual_seed(1)
first = torch.ops.aten._scaled_dot_product_flash_attention(half, half, half, 0.5)
second = torch.ops.aten._scaled_dot_product_flash_attention(half, half, half, 0.5)
assert not torch.equal(first[0], second[0]) and first[6].dtype == torch.uint64 and first[6].device == GPU
assert first[7].item() + B * H * 32 == second[7].item()  # the offset moves by batch * heads * 32

# the kernels' own ops over [batch, sequence, heads, dim]: FlashAttention's causal mask at the bottom right, a
# variable-length batch of two sequences for the memory-efficient kernel, each against the host's attention
torch.manual_seed(0)
q, k, v = (torch.randn(2, n, 4, 16, dtype=torch.bfloat16) for n in (8, 24, 24))
leaves = [t.to(GPU).requires_grad_() for t in (q, k, v)]
out = torch.ops.aten._flash_attention_forward(*leaves, None, None, 8, 24, 0.0, True, False)[0]
bottom_right = torch.ones(8, 24, dtype=torch.bool).tril(16)
ref_in = [t.transpose(1, 2).float().requires_grad_() for t in (q, k, v)]
ref = F.scaled_dot_product_attention(*ref_in, attn_mask=bottom_right).transpose(1, 2)
out.float().sum().backward()
ref.sum().backward()
torch.testing.assert_close(out.float().cpu(), ref.detach(), **TOL[torch.bfloat16])
for a, b in zip(leaves, ref_in):
    torch.testing.assert_close(a.grad.float().cpu(), b.grad.transpose(1, 2), **TOL[torch.bfloat16])
packed = [torch.randn(1, n, 4, 16) for n in (12, 20, 20)]
leaves = [t.to(GPU).requires_grad_() for t in packed]
cu_q, cu_k = torch.tensor([0, 5, 12], dtype=torch.int32), torch.tensor([0, 9, 20], dtype=torch.int32)
out, lse, *_ = torch.ops.aten._efficient_attention_forward(*leaves, None, cu_q.to(GPU), cu_k.to(GPU), 7, 11, 0.0, 1,
                                                           True)
assert lse.shape == (2, 4, 32) and out.shape == (1, 12, 4, 16)
out.sum().backward()
for (q0, q1), (k0, k1) in (((0, 5), (0, 9)), ((5, 12), (9, 20))):
    ref_in = [packed[0][:, q0:q1], packed[1][:, k0:k1], packed[2][:, k0:k1]]
    ref_in = [t.transpose(1, 2).clone().requires_grad_() for t in ref_in]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=True).transpose(1, 2)
    ref.sum().backward()
    torch.testing.assert_close(out[:, q0:q1].detach().cpu(), ref.detach())
    torch.testing.assert_close(leaves[0].grad[:, q0:q1].cpu(), ref_in[0].grad.transpose(1, 2))
    torch.testing.assert_close(leaves[1].grad[:, k0:k1].cpu(), ref_in[1].grad.transpose(1, 2))

mesh = init_device_mesh("cuda", (world,))
# context parallelism: ring attention over the flash (bfloat16) or memory-efficient (float32) op
for dtype, seq in ((torch.bfloat16, 64), (torch.float32, 128)):
    torch.manual_seed(0)
    q, k, v, g = (torch.randn(2, 4, seq, 16, device=GPU, dtype=dtype) for _ in range(4))
    ref_in = [t.cpu().float().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=True)
    ref.backward(g.cpu().float())
    with context_parallel(mesh, buffers=[q, k, v, g], buffer_seq_dims=[2, 2, 2, 2], no_restore_buffers={q, k, v, g}):
        for t in (q, k, v):
            t.requires_grad_()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(g)
        full = context_parallel_unshard(mesh, [out.detach(), q.grad, k.grad, v.grad], [2, 2, 2, 2])
    tol = TOL[dtype] if dtype != torch.float32 else dict(atol=1e-5, rtol=1e-5)
    for got, want in zip(full, (ref, *(t.grad for t in ref_in))):
        torch.testing.assert_close(got.float().cpu(), want.detach(), **tol)

# tensor parallelism: heads sharded over the ranks
torch.manual_seed(0)
host = [torch.randn(2, 4, 16, 16, dtype=torch.bfloat16) for _ in range(3)]
sharded = [DTensor.from_local(t.to(GPU).chunk(world, 1)[rank], mesh, [Shard(1)]).requires_grad_() for t in host]
out = F.scaled_dot_product_attention(*sharded, is_causal=True)
assert isinstance(out, DTensor) and out.placements == (Shard(1),)
out.full_tensor().float().pow(2).sum().backward()
ref_in = [t.clone().requires_grad_() for t in host]
ref = F.scaled_dot_product_attention(*ref_in, is_causal=True)
ref.float().pow(2).sum().backward()
torch.testing.assert_close(out.full_tensor().cpu(), ref.detach(), **TOL[torch.bfloat16])
for a, b in zip(sharded, ref_in):
    torch.testing.assert_close(a.grad.full_tensor().cpu(), b.grad, **TOL[torch.bfloat16])
dist.destroy_process_group()
print(f"OK sdpa_dispatch rank {rank}")

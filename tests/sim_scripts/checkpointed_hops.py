"""Run under `simgpu run --gpus 2`: higher-order operators with gradients, bare and inside activation
checkpointing (reentrant, non-reentrant, and selective with a policy, as torchtitan's SelectiveAC):
FlexAttention, torch.cond, scan, map, nested_compile_region. Each result and gradient is on the GPU
and equals the same function computed with plain ops on the host. The combinations torch itself
refuses on any device (cond and map under SAC, scan under non-reentrant checkpointing) are left out."""
import functools

import torch
from torch._higher_order_ops.map import map as hop_map
from torch._higher_order_ops.scan import scan
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

GPU = torch.device("cuda:1")
torch.manual_seed(0)
block_mask = create_block_mask(lambda b, h, q, kv: q >= kv, B=None, H=None, Q_LEN=128, KV_LEN=128, device=GPU)
causal = torch.ones(128, 128, dtype=torch.bool).tril()


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


def flex(q, k, v):
    if q.is_cuda:
        return flex_attention(q, k, v, block_mask=block_mask).sin()
    scores = (q @ k.transpose(-1, -2) / 4.0).masked_fill(~causal, float("-inf"))
    return (torch.softmax(scores, -1) @ v).sin()


def cond(q, k, v):
    if q.is_cuda:
        return torch.cond(q.sum() > 0, lambda a, b: (a @ b.transpose(-1, -2)).tanh() @ b, lambda a, b: a.cos() * b,
                          (q, k)) * v
    return ((q @ k.transpose(-1, -2)).tanh() @ k if q.sum() > 0 else q.cos() * k) * v


def scanned(q, k, v):
    def step(carry, x):
        new = carry * 0.5 + x.sin()
        return new, new.clone()

    if q.is_cuda:
        rows = scan(step, q[0, 0, 0], q[0, 0])[1]
    else:
        carry, out = q[0, 0, 0], []
        for x in q[0, 0]:
            carry, row = step(carry, x)
            out.append(row)
        rows = torch.stack(out)
    return rows * k[0, 0] + v[0, 0]


def mapped(q, k, v):
    if q.is_cuda:
        return hop_map(lambda x, y: (x * y).sin(), q[0], k[0, 0]) + v[0]
    return (q[0] * k[0, 0]).sin() + v[0]


@torch.compiler.nested_compile_region
def attend(a, b):
    return (a @ b.transpose(-1, -2)).softmax(-1)


def region(q, k, v):
    return attend(q, k) @ v


WRAPPERS = {
    "bare": lambda f, *t: f(*t),
    "reentrant": lambda f, *t: checkpoint(f, *t, use_reentrant=True),
    "non-reentrant": lambda f, *t: checkpoint(f, *t, use_reentrant=False),
    "selective": lambda f, *t: checkpoint(f, *t, use_reentrant=False, context_fn=functools.partial(
        create_selective_checkpoint_contexts, policy)),
}
CASES = {flex: WRAPPERS, region: WRAPPERS,
         cond: ("bare", "reentrant", "non-reentrant"), scanned: ("bare", "reentrant"),
         mapped: ("bare", "reentrant", "non-reentrant")}
host = [torch.randn(1, 2, 128, 16) for _ in range(3)]
for fn, wrappers in CASES.items():
    leaves = [t.clone().requires_grad_() for t in host]
    want = fn(*leaves)
    want.sum().backward()
    for wrapper in wrappers:
        q, k, v = (t.to(GPU).requires_grad_() for t in host)
        got = WRAPPERS[wrapper](fn, q, k, v)
        got.sum().backward()
        where = f"{fn.__name__} {wrapper}"
        assert got.device == GPU and all(t.grad.device == GPU for t in (q, k, v)), where
        torch.testing.assert_close(got.detach().cpu(), want.detach(), msg=lambda m: f"{where}: {m}")
        for sim, ref in zip((q, k, v), leaves):
            torch.testing.assert_close(sim.grad.cpu(), ref.grad, msg=lambda m: f"{where} grad: {m}")

with torch.no_grad():  # without autograd the operators' own kernels run: the same structures and values
    q = host[0].to(GPU)
    assert torch.cond(q.sum() > 0, lambda a: (a.sin(), [a * 2]), lambda a: (a.cos(), [a * 3]), (q,))[1][0].device == GPU
    torch.testing.assert_close(hop_map(lambda x: x.sin(), q[0]).cpu(), host[0][0].sin())
print("OK checkpointed_hops")

"""Run under `simgpu run --gpus 2`: tensors made by torch's C++ and by code the autograd engine runs
(hooks, custom Functions' backward, optimizers) live on the right simulated GPU."""
import torch

made_in_hook = []
w = torch.randn(4, 4, device="cuda:1", requires_grad=True)
w.register_hook(lambda g: made_in_hook.append((g.device, torch.zeros(2, device=g.device).device, (g * 2).device)))


class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        made_in_hook.append(("Function.backward", g.device, torch.ones_like(g).device))
        return g * 2


Twice.apply(w).sum().backward()
assert made_in_hook == [("Function.backward", torch.device("cuda:1"), torch.device("cuda:1")),
                        (torch.device("cuda:1"),) * 3], made_in_hook
assert w.grad.device == torch.device("cuda:1") and w.grad.is_cuda

# a transfer's gradient travels back to the source device, as CUDA's _to_copy backward
a = torch.ones(3, device="cuda:0", requires_grad=True)
(a.to("cuda:1") * torch.arange(3.0, device="cuda:1")).sum().backward()
assert a.grad.device == torch.device("cuda:0") and a.grad.tolist() == [0.0, 1.0, 2.0]
b = torch.ones(3, device="cuda:0", requires_grad=True)
(b.to("cuda:1", torch.float64) * 2).sum().backward()
assert b.grad.device == torch.device("cuda:0") and b.grad.dtype == torch.float32

# optimizers' state (made in C++ foreach kernels and in Python) lives with the parameters
for opt_cls, kwargs in [(torch.optim.Adam, {}), (torch.optim.AdamW, {"foreach": True}), (torch.optim.SGD, {"momentum": 0.9}),
                        (torch.optim.Adam, {"fused": True})]:
    layers = [torch.nn.Linear(3, 3).to("cuda:0"), torch.nn.Linear(3, 3).to("cuda:1")]
    opt = opt_cls([p for layer in layers for p in layer.parameters()], **kwargs)
    out = layers[1](layers[0](torch.ones(2, 3, device="cuda:0")).to("cuda:1")).sum()
    out.backward()
    opt.step()
    for layer, index in zip(layers, (0, 1)):
        for p in layer.parameters():
            assert p.device == torch.device("cuda", index)
            for value in opt.state[p].values():
                if torch.is_tensor(value) and value.dim() > 0:
                    assert value.device == p.device, (opt_cls, kwargs, value.device, p.device)

# zero gradients autograd makes as efficient zero tensors (sgn's, normal's for mean and std, a max-pool
# backward's gradient for its indices) own no memory; on CUDA they report the input's GPU
for make in (lambda x: torch.sgn(x), lambda x: torch.normal(x, x.abs() + 1),
             lambda x: torch.ops.aten.max_pool2d_with_indices_backward(
                 torch.ones(1, 1, 1, 1, device=x.device), x.reshape(1, 1, 2, 2), [2, 2], [2, 2], [0, 0], [1, 1], False,
                 torch.zeros(1, 1, 1, 1, dtype=torch.long, device=x.device))):
    x = torch.randn(4, device="cuda:1", requires_grad=True)
    g, = torch.autograd.grad(make(x).sum(), x)
    assert g.device == torch.device("cuda:1") and g.is_cuda and g.get_device() == 1, g.device
    assert (g + torch.ones(4, device="cuda:1")).device == torch.device("cuda:1") and (g + 1).is_cuda
    torch.testing.assert_close(g.detach(), torch.zeros(4, device="cuda:1"))  # a labelled zero tensor crashed here
    gg = torch.func.grad(lambda t: make(t).sum())(x.detach())
    assert gg.device == torch.device("cuda:1"), gg.device

# zero gradients made from the gradient's options in a node that saves no tensor (repeat's for a zero repeat,
# normal's for a mean with a float std, for a std with a float mean): the GPU of the node's inputs, found
# through their producers (a leaf, a transfer's target, an intermediate's saved tensors)
x0 = torch.randn(2, 3, device="cuda:0", requires_grad=True)
for make, source in [(lambda t: t.repeat(0, 2), lambda: x1), (lambda t: (t * t).repeat(2, 0, 1), lambda: x1),
                     (lambda t: torch.normal(t, 0.5), lambda: x1), (lambda t: torch.normal(2.7, t.abs() + 1), lambda: x1),
                     (lambda t: torch.normal(t, 0.5), lambda: x0)]:
    x1 = x0.detach().to("cuda:1").requires_grad_()
    given = source()
    inner = given.to("cuda:1") if given.device != torch.device("cuda:1") else given  # a transfer, x0 to cuda:1
    out = make(inner)
    for wrt in {id(inner): inner, id(given): given}.values():
        g, = torch.autograd.grad(out.sum(), wrt, retain_graph=True)
        assert g.device == wrt.device and not g.any(), (g.device, wrt.device)

# what a C++ function makes from its input's options alone (the norm of an empty matrix) is on its GPU
for shape, ord in [((0, 0), 2), ((5, 0), 2), ((0, 0), 1), ((0, 5), 1), ((0, 0), float("inf")), ((0, 5), float("inf"))]:
    for dtype in (torch.float32, torch.float64, torch.complex64):
        got = torch.linalg.norm(torch.zeros(shape, device="cuda:1", dtype=dtype), ord=ord)
        want = torch.linalg.norm(torch.zeros(shape, dtype=dtype), ord=ord)
        assert got.device == torch.device("cuda:1") and got.dtype == want.dtype, (shape, ord, got.device, got.dtype)
        assert torch.equal(got.cpu(), want) and want.device == torch.device("cpu")

# a host gradient given to a host parameter stays on the host when the parameter's data moves to a GPU
# (FSDP1's CPU offload swaps its flat parameter between a host shard and a GPU buffer and keeps `_cpu_grad`)
p = torch.nn.Parameter(torch.zeros(2))
host_grad = torch.ones(2)
p.grad = host_grad
p.data = torch.zeros(4, device="cuda:1")
assert p.device == torch.device("cuda:1") and p.grad.device == torch.device("cpu") and not host_grad.is_cuda, \
    (p.grad.device, host_grad.device)
p.data = torch.zeros(2)
assert p.grad is host_grad and p.grad.device == torch.device("cpu")
lin = torch.nn.Linear(2, 2)
lin.weight.grad = torch.ones(2, 2)
lin.cuda(1)  # Module._apply moves the gradients with the parameters
assert lin.weight.grad.device == torch.device("cuda:1"), lin.weight.grad.device

# torch.Size stays torch.Size; integer devices mean CUDA devices
t = torch.zeros(2, 3, device=1)
assert type(t.size()) is torch.Size and type(t.shape) is torch.Size and t.get_device() == 1
m = torch.nn.Linear(2, 2).to(1)
assert m.weight.device == torch.device("cuda:1") and torch.ones(1).to(0).device == torch.device("cuda:0")
assert torch.accelerator.current_accelerator(check_available=True) == torch.device("cuda") \
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "current_accelerator") else True
print("OK autograd_placement")

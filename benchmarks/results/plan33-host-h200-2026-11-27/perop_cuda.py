import time, torch, json
dev = "cuda"
x = torch.randn(64, 64, device=dev); w = torch.randn(64, 64, device=dev, requires_grad=True)
lin = torch.nn.Linear(64, 64).to(dev); ws = [torch.randn(64, device=dev) for _ in range(50)]
def add(): x + x
def view(): x.view(-1)
def mm(): x @ x
def linear(): torch.nn.functional.linear(x, w)
def module(): lin(x)
def fwdbwd(): (x @ w).sum().backward()
def foreach(): torch._foreach_add_(ws, 1.0)
out = {}
for f in (add, view, mm, linear, module, fwdbwd, foreach):
    best = 1e9
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(500): f()
        best = min(best, (time.perf_counter() - t0) / 500 * 1e6)
    out[f.__name__] = round(best, 2)
print(json.dumps(out))

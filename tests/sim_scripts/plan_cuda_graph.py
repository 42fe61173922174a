"""Run under `simgpu run --plan GPU --gpus 1`: a training step captured whole in a CUDA graph (PyTorch's
documentation's pattern: warm-up on a side stream, capture, replay per batch). The capture runs no kernel
(nothing priced), each replay is a step with the captured step's kernels, issued by the host at once."""
import torch, torch.nn as nn
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
x = torch.randn(64, 1024, device="cuda"); y = torch.randn(64, 1024, device="cuda")
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        opt.zero_grad(set_to_none=True); nn.functional.mse_loss(model(x), y).backward(); opt.step()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    loss = nn.functional.mse_loss(model(x), y); loss.backward(); opt.step()
for i in range(5):  # five steps, one replay each
    g.replay()
torch.cuda.synchronize()
print("loss", loss.item(), "peak", torch.cuda.max_memory_allocated())

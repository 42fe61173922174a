"""Run under `simgpu run --gpus 1`: CUDA graphs as PyTorch's documentation uses them (simgpu/cuda_sim/graphs.py),
each against the same work run eagerly. Before, torch.cuda.CUDAGraph, torch.cuda.graph and
make_graphed_callables were refused.

- torch.cuda.graph of a module: a replay reads the static input's new values and writes the same output tensor.
- A capture changes nothing the program had: an in-place add captured leaves its tensor as it was until replayed.
- The documentation's whole-network capture (warm-up on a side stream, zero_grad, forward, backward and a
  capturable Adam step in one graph, replayed per batch) trains the parameters the eager loop trains.
- make_graphed_callables: forward and gradients equal to the module's own.
- Dropout inside a graph draws a new mask at each replay.
- As on CUDA: capturing on the default stream fails, `.item()` and synchronize inside a capture fail with
  CUDA's error and the capture's end with its "previous error", is_current_stream_capturing() is True only inside.
All of it passes on 2 H200s as it stands (torch 2.11).
"""
import copy

import torch
import torch.nn as nn

torch.manual_seed(0)
dev = "cuda"

# --- a module captured, replayed on new input values
lin = nn.Linear(16, 8).to(dev)
static_x = torch.randn(4, 16, device=dev)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        lin(static_x)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
assert not torch.cuda.is_current_stream_capturing()
with torch.cuda.graph(g):
    assert torch.cuda.is_current_stream_capturing()
    static_y = torch.relu(lin(static_x)) * 2
assert not torch.cuda.is_current_stream_capturing()
for _ in range(3):
    new = torch.randn(4, 16, device=dev)
    static_x.copy_(new)
    before = static_y
    g.replay()
    assert static_y is before
    torch.testing.assert_close(static_y, torch.relu(lin(new)) * 2)

# --- a capture does not run the work: an in-place add happens at each replay only
counter = torch.zeros(3, device=dev)
g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2):
    counter.add_(1)
assert counter.tolist() == [0.0, 0.0, 0.0], counter
g2.replay()
g2.replay()
assert counter.tolist() == [2.0, 2.0, 2.0], counter

# --- whole-network capture, as in PyTorch's CUDA graphs documentation, against the eager loop
torch.manual_seed(1)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(dev)
eager_model = copy.deepcopy(model)
loss_fn = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
eager_opt = torch.optim.Adam(eager_model.parameters(), lr=0.01, capturable=True)
batches = [(torch.randn(8, 32, device=dev), torch.randn(8, 4, device=dev)) for _ in range(8)]
static_input, static_target = batches[0][0].clone(), batches[0][1].clone()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for m, opt in ((model, optimizer), (eager_model, eager_opt)):
        for _ in range(3):  # warm-up, as the documentation does (it also builds Adam's state)
            opt.zero_grad(set_to_none=True)
            loss_fn(m(static_input), static_target).backward()
            opt.step()
torch.cuda.current_stream().wait_stream(s)
before_capture = [p.detach().clone() for p in model.parameters()]
graph = torch.cuda.CUDAGraph()
optimizer.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = loss_fn(model(static_input), static_target)
    static_loss.backward()
    optimizer.step()
for p, kept in zip(model.parameters(), before_capture):
    assert torch.equal(p.detach(), kept), "the capture stepped the optimizer"
for data, target in batches:
    static_input.copy_(data)
    static_target.copy_(target)
    graph.replay()
    eager_opt.zero_grad(set_to_none=True)
    eager_loss = loss_fn(eager_model(data), target)
    eager_loss.backward()
    eager_opt.step()
    torch.testing.assert_close(static_loss, eager_loss)
for p, q in zip(model.parameters(), eager_model.parameters()):
    torch.testing.assert_close(p, q)

# --- make_graphed_callables: the graphed module's forward and gradients are the module's
torch.manual_seed(2)
net = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)).to(dev)
twin = copy.deepcopy(net)
sample = torch.randn(5, 8, device=dev, requires_grad=True)
graphed = torch.cuda.make_graphed_callables(net, (sample,))
for _ in range(3):  # as the documentation's loop: fresh gradients each iteration
    net.zero_grad(set_to_none=True)
    twin.zero_grad(set_to_none=True)
    x = torch.randn(5, 8, device=dev, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_(True)
    out, out_twin = graphed(x), twin(x_twin)
    torch.testing.assert_close(out, out_twin)
    out.pow(2).sum().backward()
    out_twin.pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_twin.grad)
    for p, q in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad)

# --- random numbers inside a graph are drawn again at each replay
drop_in = torch.ones(4096, device=dev)
g3 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g3):
    dropped = nn.functional.dropout(drop_in, 0.5)
g3.replay()
first = dropped.clone()
g3.replay()
assert not torch.equal(first, dropped) and set(dropped.unique().tolist()) <= {0.0, 2.0}

# --- what CUDA refuses
g4 = torch.cuda.CUDAGraph()
try:
    g4.capture_begin()
except RuntimeError as exc:
    assert "non-default stream" in str(exc), exc
else:
    raise AssertionError("a capture on the default stream was accepted")
for bad in (lambda: static_x.sum().item(), torch.cuda.synchronize):
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            bad()
    except RuntimeError as exc:  # the capture's end fails after the refused call, as CUDA's does
        assert "operation failed due to a previous error during capture" in str(exc), exc
        assert "operation not permitted when stream is capturing" in str(exc.__context__), exc.__context__
    else:
        raise AssertionError("a host read-back inside a capture was accepted")
    assert not torch.cuda.is_current_stream_capturing()
assert isinstance(torch.cuda.graph_pool_handle(), tuple)
print("OK cuda_graphs")

"""Run under torchrun on 2 simulated GPUs (or 2 real ones): collectives captured in a CUDA graph are issued
again at each replay, on the values their tensors hold then (graphs.py). PyTorch's own NCCL test
(test_allreduce_in_cudagraph: a capture leaves the tensor as it was, each replay all-reduces it again,
a graph captured anew works alike), then an op feeding the all_reduce inside the graph. It passes on 2 H200s
(2026-11-27, torch 2.11, NCCL 2.28.9) as it stands."""
import os

import torch
import torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
rank, world = dist.get_rank(), dist.get_world_size()
xs = torch.ones(1, device="cuda")
dist.all_reduce(xs)  # one warm-up, as NCCL needs its communicator before a capture
expected = world
assert xs.item() == expected
for _ in range(2):  # a graph captured anew
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(xs)
        dist.broadcast(xs, src=0)
    assert xs.item() == expected, (rank, xs.item())  # the capture changed nothing
    graph.replay()
    graph.replay()
    expected *= world * world
    assert xs.item() == expected, (rank, xs.item(), expected)
print(f"captured anew {rank}", flush=True)

w = torch.ones(4, device="cuda")
t = torch.full((4,), float(rank + 1), device="cuda")
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = t * w
    dist.all_reduce(out)
for i in range(3):
    w.fill_(float(i + 1))
    g.replay()
    assert out.tolist() == [sum(range(1, world + 1)) * (i + 1.0)] * 4, (rank, i, out.tolist())
del g, graph  # on 2 H200s (torch 2.11, NCCL 2.28.9) destroy_process_group hangs while a graph with NCCL's
torch.cuda.synchronize()  # kernels in it is alive
dist.destroy_process_group()
print(f"OK cuda_graph_collective {rank}", flush=True)

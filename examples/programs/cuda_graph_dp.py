"""Data parallelism with the whole training step captured in a CUDA graph, as NVIDIA's and PyTorch's
CUDA-graph recipes write it: warm-up steps on a side stream (they also build Adam's state), then
forward, backward, the gradients' all_reduce and a capturable Adam step captured once and replayed
for each batch, the batch copied into the graph's static input first.

    torchrun --nproc-per-node 2 cuda_graph_dp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

GLOBAL_BATCH = 32
WARMUP = 3
STEPS = 5


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 4)).cuda()
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, capturable=True)

    g = torch.Generator().manual_seed(42)
    batches = [(torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randn(GLOBAL_BATCH, 4, generator=g))
               for _ in range(WARMUP + STEPS)]
    per_rank = GLOBAL_BATCH // world_size

    def shard(t):
        return t[rank * per_rank:(rank + 1) * per_rank].cuda()

    static_x, static_y = shard(batches[0][0]), shard(batches[0][1])

    def train_step():
        loss = F.mse_loss(model(static_x), static_y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world_size)
        optimizer.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        return mean_loss.div_(world_size)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(WARMUP):
            static_x.copy_(shard(batches[i][0]))
            static_y.copy_(shard(batches[i][1]))
            optimizer.zero_grad(set_to_none=True)
            train_step()
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = train_step()

    for step in range(STEPS):
        x, y = batches[WARMUP + step]
        static_x.copy_(shard(x))
        static_y.copy_(shard(y))
        graph.replay()
        if rank == 0:
            print(f"step {step} loss {static_loss.item():.6f}")
    if rank == 0:
        print(f"final {sum(p.detach().double().sum().item() for p in model.parameters()):.6f}")
    del graph  # NCCL's communicators are destroyed after the graphs that hold their kernels
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

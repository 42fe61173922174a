"""A "cpu:gloo,cuda:nccl" group has one communicator per device type, as on CUDA: host-tensor collectives
keep their own order, apart from the GPU collectives (what async_save's background thread relies on).

Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: the two ranks start a GPU and a host
collective in opposite orders (both asynchronous), then a host collective from a second thread while the
main thread all-reduces GPU tensors; both orders must give the right sums."""
import os
import threading

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("cpu:gloo,cuda:nccl")
world = dist.get_world_size()

gpu = torch.full((4,), float(rank + 1), device="cuda")
host = torch.full((3,), float(10 * (rank + 1)))
if rank == 0:
    works = [dist.all_reduce(gpu, async_op=True), dist.all_reduce(host, async_op=True)]
else:
    works = [dist.all_reduce(host, async_op=True), dist.all_reduce(gpu, async_op=True)]
for work in works:
    work.wait()
total = world * (world + 1) / 2
assert gpu.device.type == "cuda" and torch.equal(gpu.cpu(), torch.full((4,), total)), gpu
assert host.device.type == "cpu" and torch.equal(host, torch.full((3,), 10 * total)), host

# a host all_gather in a thread while the main thread all-reduces on the GPU, each several times
gathered = []

def background():
    for i in range(5):
        out = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(out, torch.tensor([rank, i]))
        gathered.append(torch.stack(out))

thread = threading.Thread(target=background)
thread.start()
for i in range(5):
    t = torch.ones(8, device="cuda") * (i + 1)
    dist.all_reduce(t)
    assert torch.equal(t.cpu(), torch.full((8,), float(world * (i + 1)))), t
thread.join()
for i, g in enumerate(gathered):
    assert torch.equal(g, torch.tensor([[r, i] for r in range(world)])), g
# object collectives still work, and a barrier
objects = [None] * world
dist.all_gather_object(objects, {"rank": rank})
assert objects == [{"rank": r} for r in range(world)], objects
dist.barrier()
if rank == 0:
    print("OK host_and_gpu_group", flush=True)
dist.destroy_process_group()

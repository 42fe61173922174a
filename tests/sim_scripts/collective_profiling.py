"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: a profiler sees each NCCL collective as
ProcessGroupNCCL shows it (distributed_test.py's `call_dist_op` and `_test_send_recv_nccl` count them): one
asynchronous record per call, named `nccl:<op>` (`nccl:send 0->1` for point to point), its input shapes
recorded, and one record for a coalesced call."""
import os

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")


def events(prof, name):
    return [e for e in prof.function_events if e.name.startswith(name)]


t = torch.ones(3, 5, device="cuda")
with torch.autograd.profiler.profile(record_shapes=True) as prof:
    dist.all_reduce(t)
    dist.all_reduce(t, async_op=True).wait()
    gathered = [torch.empty(3, 5, device="cuda") for _ in range(2)]
    dist.all_gather(gathered, t)
    out = torch.empty(6, 5, device="cuda")
    dist.all_gather_into_tensor(out, t)
    dist.all_to_all_single(torch.empty(4, 2, device="cuda"), torch.ones(4, 2, device="cuda"))
    dist.broadcast(t, src=0)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(out, t)
        dist.all_gather_into_tensor(torch.empty(6, 5, device="cuda"), t)
    cm.wait()
    dist.barrier()
    if rank == 0:
        dist.send(torch.ones(2, 2, device="cuda"), 1)
    else:
        dist.recv(torch.empty(2, 2, device="cuda"), 0)

expected = {"nccl:all_reduce": (2, [[3, 5]]), "nccl:all_gather": (1, [[3, 5]]),
            "nccl:_all_gather_base": (1, [[3, 5]]), "nccl:all_to_all": (1, [[4, 2]]),
            "nccl:broadcast": (1, [[3, 5]]), "nccl:all_gather_into_tensor_coalesced": (1, [[3, 5], [3, 5]]),
            "nccl:all_reduce_barrier": (1, [[1]]), "nccl:send 0->1" if rank == 0 else "nccl:recv 1<-0": (1, [[2, 2]])}
for name, (count, shapes) in expected.items():
    found = [e for e in events(prof, name) if e.name == name]
    assert len(found) == count, (rank, name, [e.name for e in prof.function_events if e.name.startswith("nccl")])
    for e in found:
        assert e.is_async, (name, "not asynchronous")
        assert e.input_shapes == shapes, (name, e.input_shapes)
assert not events(prof, "gloo:"), [e.name for e in events(prof, "gloo:")]

dist.all_reduce(t)  # with no profiler on: nothing recorded, nothing fails
dist.destroy_process_group()
print(f"OK collective_profiling {rank}")

"""Under `simgpu run --plan ... --ranks 0,1` (tests/test_plan.py): messages between the sampled ranks, as
torch.distributed.pipelining sends them. Each case prints "OK <case>" on the receiver:

- objects: send_object_list / recv_object_list of a small object. The pickled bytes travel as a uint8 GPU
  tensor with data; a storage-less tensor inside the object pickles as zeros.
- meta: an object of `t.to("meta")` of a storage-less activation (torch 2.11's PipelineStage shape
  inference sends its outputs so): meta tensors, a few hundred bytes of pickle (on CUDA as here), not the
  activation's 8 MiB of zeros, and they arrive on the meta device.
- large: an object of 2 MiB: its bytes are past the 1 MiB of data a plan keeps in the integer GPU tensors it
  makes (recv_object_list's buffer is torch.empty), and arrive whole; the receive buffer's charge is freed
  with it.
- batch: batch_isend_irecv of a P2POp list (a size, an integer payload past 1 MiB moved from the host, a
  storage-less activation) into preallocated buffers, as a pipeline stage receives.
"""
import inspect
import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
# torch >= 2.14 reads a group's rank and size from its default backend: each sampled rank is its own rank
assert (rank, dist.get_world_size()) == (int(os.environ["RANK"]), 2), (rank, dist.get_world_size())
torch.cuda.set_device(rank)
device = torch.device("cuda", rank)
# pipelining passes use_batch=True where torch has it (2.13): the object's tensors go through batch_isend_irecv
batched = {"use_batch": True} if "use_batch" in inspect.signature(dist.send_object_list).parameters else {}
LARGE = bytes(range(256)) * (8 << 10)  # 2 MiB
PAYLOAD = 300_000  # int32: 1.2 MB

if rank == 0:
    dist.send_object_list([{"shape": [3, 4], "x": torch.randn(2, device="cuda")}], dst=1)
    activation = torch.randn(1, 2048, 1024, device="cuda")
    dist.send_object_list([(activation.to("meta"),)], dst=1, device=device, **batched)
    dist.send_object_list([LARGE], dst=1, device=device, **batched)
    ops = [dist.P2POp(dist.isend, torch.tensor([7, PAYLOAD], device=device), 1),
           dist.P2POp(dist.isend, torch.arange(PAYLOAD, dtype=torch.int32).to(device), 1),
           dist.P2POp(dist.isend, activation, 1)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
else:
    got = [None]
    dist.recv_object_list(got, src=0)
    assert got[0]["shape"] == [3, 4] and got[0]["x"].shape == (2,), got
    assert bool((got[0]["x"].cpu() == 0).all()), got
    print("OK objects", flush=True)

    got = [None]
    dist.recv_object_list(got, src=0, device=device, **batched)
    (meta,) = got[0]
    assert meta.device.type == "meta" and meta.shape == (1, 2048, 1024), (meta.device, meta.shape)
    print("OK meta", flush=True)

    got = [None]
    before = torch.cuda.memory_allocated(device)
    dist.recv_object_list(got, src=0, device=device, **batched)
    assert got[0] == LARGE, (len(got[0]), got[0][:16])
    assert torch.cuda.memory_allocated(device) == before, (torch.cuda.memory_allocated(device), before)
    print("OK large", flush=True)

    sizes = torch.empty(2, dtype=torch.long, device=device)
    payload = torch.empty(PAYLOAD, dtype=torch.int32, device=device)
    activation = torch.empty(1, 2048, 1024, device=device)
    ops = [dist.P2POp(dist.irecv, sizes, 0), dist.P2POp(dist.irecv, payload, 0),
           dist.P2POp(dist.irecv, activation, 0)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert sizes.tolist() == [7, PAYLOAD], sizes
    assert payload.device == device and bool((payload.cpu() == torch.arange(PAYLOAD, dtype=torch.int32)).all())
    assert int(payload[-1].item()) == PAYLOAD - 1 and activation.shape == (1, 2048, 1024)
    print("OK batch", flush=True)
dist.destroy_process_group()

"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: init_process_group(device_id=...) binds the
default group to the rank's GPU, and the groups made from it (new_group, DeviceMesh's, split_group's) are
bound to it too, as with NCCL (PyTorch's test_device_mesh.py::test_2d_mesh_eager_init_subgroup)."""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

here = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(here)
dist.init_process_group("nccl", device_id=here)
rank = dist.get_rank()
assert dist.distributed_c10d._get_default_group().bound_device_id == here

mesh = init_device_mesh("cuda", (1, 2), mesh_dim_names=("dp", "tp"))  # bound: DeviceMesh uses split_group
for dim in ("dp", "tp"):
    group = mesh.get_group(dim)
    assert group.bound_device_id == here, (dim, group.bound_device_id)
t = torch.full((2,), float(rank + 1), device="cuda")
dist.all_reduce(t, group=mesh.get_group("tp"))
assert t.tolist() == [3.0, 3.0], t
dist.all_reduce(t, group=mesh.get_group("dp"))  # a group of one
assert t.tolist() == [3.0, 3.0], t

split = dist.split_group(split_ranks=[[0], [1]])
assert dist.get_process_group_ranks(split) == [rank] and split.bound_device_id == here
only_first = dist.split_group(split_ranks=[[0]])
assert (only_first not in (None, dist.GroupMember.NON_GROUP_MEMBER)) == (rank == 0), only_first
pair = dist.new_group([0, 1])
assert pair.bound_device_id == here
dist.broadcast(t, src=1, group=pair)
dist.barrier()
dist.destroy_process_group()
print(f"OK bound_device_groups {rank}")

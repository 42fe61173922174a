"""Run under `simgpu run --gpus 4 torchrun --nproc-per-node 4`: a default group bound to its GPU.

`init_process_group(device_id=...)` (NCCL's eager set-up, torchtitan's and PyTorch's tests' way) binds
the group to the device: `bound_device_id` is that device, new groups inherit it, and DeviceMesh then
splits the default group (split_group, ncclCommSplit) instead of making groups one by one; each mesh
group is bound too (PyTorch's test_2d_mesh_eager_init_subgroup, which passes on 4 H200s). Before, the
simulation dropped device_id: every group's bound_device_id was None."""
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

rank = int(__import__("os").environ["RANK"])
torch.cuda.set_device(rank)
try:  # torch checks device_id as for NCCL
    dist.init_process_group("nccl", device_id=torch.device("cuda"))
except ValueError as exc:
    assert "index" in str(exc), exc
else:
    raise AssertionError("a device_id without an index was accepted")
dist.init_process_group(device_id=torch.device("cuda", rank))  # no backend: the device's, NCCL
assert dist.get_backend() == "nccl", dist.get_backend()
here = torch.device("cuda", rank)
assert dist.distributed_c10d._get_default_group().bound_device_id == here
pair = dist.new_group([0, 1])
if rank < 2:
    assert pair.bound_device_id == here, pair.bound_device_id
mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
for dim in ("dp", "tp"):
    group = mesh.get_group(dim)
    assert group.bound_device_id == here, (dim, group.bound_device_id)
    assert dist.get_process_group_ranks(group) == mesh[dim].mesh.tolist(), (dim, dist.get_process_group_ranks(group))
    t = torch.full((3,), float(rank), device="cuda")
    dist.all_reduce(t, group=group)
    assert t.tolist() == [float(sum(mesh[dim].mesh.tolist()))] * 3, (dim, t)
x = torch.arange(16.0).reshape(4, 4)
d = distribute_tensor(x, mesh, [Shard(0), Shard(1)])
assert torch.equal(d.redistribute(mesh, [Replicate(), Replicate()]).to_local().cpu(), x)
sub = dist.distributed_c10d.split_group(split_ranks=[[0, 3], [1, 2]])
assert sub.bound_device_id == here and dist.get_process_group_ranks(sub) == ([0, 3] if rank in (0, 3) else [1, 2])
dist.destroy_process_group()
if rank == 0:
    print("OK eager_init")

"""Run under `simgpu run --gpus 4`: PyTorch's LocalTensorMode tests (every rank in one process, as
test_random_ops.py's *WithLocalTensor classes run, issue 27) on simulated GPUs."""
import torch
import torch.distributed as dist
import torch.distributed.tensor as dtensor
from torch.distributed._local_tensor import LocalTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard
from torch.distributed.tensor.debug import CommDebugMode
from torch.testing._internal.distributed.fake_pg import FakeStore

WORLD = 4
dist.init_process_group("fake", rank=0, world_size=WORLD, store=FakeStore())
mesh = init_device_mesh("cuda", (WORLD,))
cuda0 = torch.device("cuda", 0)

# A factory called with device="cuda" inside a dispatch mode of the program's makes GPU tensors, as on CUDA:
# LocalTensorMode's one tensor per rank, CommDebugMode's result
with LocalTensorMode(frozenset(range(WORLD))):
    x = torch.empty(2, device="cuda")
    assert x.device == cuda0 and all(t.device == cuda0 for t in x._local_tensors.values()), x._local_tensors
with CommDebugMode():
    assert torch.zeros(3, device="cuda").device == cuda0

# CUDA's numbers for seed 42, drawn outside any mode
torch.manual_seed(42)
expected = torch.empty(4, device="cuda").uniform_(0.0, 1.0).cpu()

# test_random_ops.py::DistTensorRandomInitTestWithLocalTensor::test_init_with_user_generator: a user CUDA
# generator gives the default generator's numbers; each rank's shard draws its own part of the stream
with LocalTensorMode(frozenset(range(WORLD))):
    torch.manual_seed(42)
    rng = torch.Generator(device="cuda").manual_seed(42)
    t1 = dtensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
    t2 = dtensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
    for i in range(2):
        torch.nn.init.uniform_(t1, 0.0, 1.0)
        torch.nn.init.uniform_(t2, 0.0, 1.0, rng)
        full1, full2 = t1.full_tensor(), t2.full_tensor()
        assert torch.equal(full1, full2), (i, full1, full2)
        if i == 0:
            rank0 = full1._local_tensors[0].flatten().cpu()
            assert torch.equal(rank0[:4], expected), (rank0[:4], expected)
            assert not torch.equal(rank0[:6], rank0[6:12]), "ranks 0 and 1 drew the same numbers"
print("OK local_tensor_meets")

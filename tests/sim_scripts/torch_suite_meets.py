"""Run under `simgpu run --gpus 2 torchrun --nproc-per-node 2`: what PyTorch's own distributed tests
(benchmarks/torch_suite/upstream.py, issue 27) needed of the simulation, each as those tests call it."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
from torch.distributed.tensor import Shard, distribute_tensor

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.accelerator.set_device_index(rank)  # as FSDPTest does

# FSDPTest calls torch._dynamo.reset() around every test; with CUDA available it imports
# torch._inductor.cudagraph_trees, whose CUDA-build branch imports a torch._C binding
import torch._dynamo  # noqa: E402

torch._dynamo.reset()
from torch._inductor.cudagraph_trees import reset_cudagraph_trees  # noqa: E402

reset_cudagraph_trees()

# A DTensor's device is its local tensor's at construction and stays so when the local tensor is swapped
mesh = dist.device_mesh.init_device_mesh("cuda", (2,))
dt = distribute_tensor(torch.arange(8.0), mesh, [Shard(0)])
assert dt.device == torch.device("cuda", rank), dt.device
dt._local_tensor = dt._local_tensor.cpu()
assert dt.device == torch.device("cuda", rank) and dt._local_tensor.device.type == "cpu", (dt.device,)
assert distribute_tensor(torch.arange(8.0), mesh, [Shard(0)]).cpu().device.type == "cpu"  # a host DTensor

# A CUDA generator passed to a DTensor random op reaches DTensor's RNG tracker as a fresh wrapper
# (test_random_ops.py::test_init_with_user_generator): still a 16-byte CUDA state, same numbers as the
# default generator with the same seed
t1 = torch.distributed.tensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
t2 = torch.distributed.tensor.empty((8, 3), device_mesh=mesh, placements=[Shard(0)])
torch.manual_seed(42)
rng = torch.Generator(device="cuda").manual_seed(42)
for _ in range(2):
    torch.nn.init.uniform_(t1, 0.0, 1.0)
    torch.nn.init.uniform_(t2, 0.0, 1.0, rng)
    assert torch.equal(t1.full_tensor(), t2.full_tensor())
assert rng.get_state().numel() == 16 and rng.get_offset() > 0

# Functional collectives' out= form (test_c10d_functional_native.py::test_all_gather_into_tensor_single):
# its C++ picks the group's backend by the tensors' device, and wait_tensor waits for the registered work
torch._C._distributed_c10d._register_process_group("default", dist.group.WORLD)
gathered = torch.empty(4, device="cuda")
piece = torch.full((2,), float(rank), device="cuda")
done = torch.ops._c10d_functional.all_gather_into_tensor_out(piece, 2, "default", out=gathered)
assert done is gathered
torch.ops._c10d_functional.wait_tensor(done)
assert gathered.tolist() == [0.0, 0.0, 1.0, 1.0] and gathered.device == torch.device("cuda", rank), gathered

# c10d collectives on an NCCL group reach NCCL through the dispatcher, so a dispatch mode of the program's
# sees each one (test_parallelize_api.py::test_parallelize_module_src_data_rank counts distribute_tensor's
# scatter with CommDebugMode); the data still moves as without the mode
from torch.distributed.tensor.debug import CommDebugMode  # noqa: E402

received = torch.empty(2, device="cuda")
for name, call in [("scatter", lambda: dist.scatter(received, [torch.full((2,), 5.0 + r, device="cuda")
                                                               for r in range(2)] if rank == 1 else None, src=1)),
                   ("broadcast", lambda: dist.broadcast(received, src=0)),
                   ("allreduce", lambda: dist.all_reduce(received))]:
    comm_mode = CommDebugMode()
    with comm_mode:
        call()
    counts = {op._qualified_op_name if hasattr(op, "_qualified_op_name") else str(op): n
              for op, n in comm_mode.get_comm_counts().items()}
    assert comm_mode.get_total_counts() == 1 and list(counts) == [f"c10d::{name}_"], (name, counts)
assert received.tolist() == [10.0, 10.0], received  # scattered 5 to rank 0, broadcast, summed over 2 ranks


# FSDP2 CPU offload (test_fully_shard_state_dict.py::test_dp_state_dict_cpu_offload): a GPU state dict
# loaded into a pinned-CPU-offload model is refused at lazy init, a host one is taken
def offload_case(pin_memory: bool, cpu_state_dict: bool) -> str:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
    policy = CPUOffloadPolicy(pin_memory=pin_memory)
    for module in model:
        fully_shard(module, offload_policy=policy)
    fully_shard(model, offload_policy=policy)
    for name, param in model.named_parameters():
        sharded = distribute_tensor(torch.randn(param.size()), param.device_mesh, param.placements)
        model.load_state_dict({name: sharded.cpu() if cpu_state_dict else sharded}, assign=True, strict=False)
    try:
        model(torch.rand(4, 4, device="cuda")).sum()
    except RuntimeError as e:
        assert "Found following parameters on non-CPU device: [('0.weight', device(type='cuda'" in str(e), e
        return "refused"
    assert all(v.device.type == "cpu" for v in model.state_dict().values())
    return "taken"


for pin in (True, False):
    assert offload_case(pin, cpu_state_dict=True) == "taken"
    assert offload_case(pin, cpu_state_dict=False) == "refused", pin

dist.destroy_process_group()
if rank == 0:
    print("OK torch_suite_meets")

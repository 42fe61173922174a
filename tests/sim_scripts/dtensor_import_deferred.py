"""Run under `simgpu run --gpus 1` (with and without the warm template): a simulated process that has not
imported torch.distributed.tensor has not marked DTensors safe for torch.load(weights_only=True), as on a
GPU (PyTorch's test_dtensor_save_load_import); importing it, or anything that imports it, does."""
import subprocess
import sys
import tempfile

import torch

assert "torch.distributed.tensor" not in sys.modules, "the simulation imported torch.distributed.tensor"
assert "torch._dynamo" not in sys.modules, "the simulation's torch._dynamo is in the program's sight"
assert not any("DTensor" in repr(g) for g in torch.serialization.get_safe_globals()), \
    torch.serialization.get_safe_globals()

import torch.distributed as dist  # noqa: E402
from torch.distributed.tensor import DTensor, Shard  # noqa: E402

assert any(g is DTensor for g in torch.serialization.get_safe_globals())
torch.cuda.set_device(0)
dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
mesh = dist.device_mesh.init_device_mesh("cuda", (1,))
dt = DTensor.from_local(torch.arange(6.0, device="cuda").reshape(2, 3), mesh, [Shard(0)])
REFUSED = "``torch.distributed.tensor`` must be imported to load DTensors"
with tempfile.NamedTemporaryFile(suffix=".pt") as f:
    torch.save(dt, f.name)
    for before, refused in (("", True), ("import torch.distributed.tensor;", False),
                            ("import torch.distributed.fsdp;", False), ("import torch._dynamo;", False)):
        script = f"import torch;{before}t = torch.load({f.name!r}, weights_only=True);print(t.device, t.placements)"
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
        if refused:
            assert done.returncode != 0 and REFUSED in done.stderr, (before, done.stdout, done.stderr[-2000:])
        else:
            assert done.returncode == 0 and "cuda:0 (Shard(dim=0),)" in done.stdout, (before, done.stderr[-2000:])

# what the program imports is the module the simulation loaded (not run a second time), torch.compile included
import torch._dynamo  # noqa: E402

assert sys.modules["torch._dynamo"] is torch._dynamo
assert torch.compile(lambda x: x * 2)(torch.ones(2, device="cuda")).tolist() == [2.0, 2.0]
dist.destroy_process_group()
print("OK dtensor_import_deferred")

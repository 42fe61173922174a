"""simgpu/cuda_sim/deferred_imports.py's choice of what to hide (the hiding itself runs in simulated
processes: tests/test_simgpu_run.py::test_dtensor_checkpoints_need_torch_distributed_tensor_imported)."""
from __future__ import annotations

from simgpu.cuda_sim.deferred_imports import reaching


def test_modules_whose_import_imports_the_target_through_imports_or_parent_packages() -> None:
    edges = {"torch._dynamo": {"torch._dynamo.utils"}, "torch._dynamo.utils": {"torch.distributed.fsdp"},
             "torch.distributed.fsdp": {"torch.distributed.fsdp._x"}, "torch.distributed.fsdp._x":
             {"torch.distributed.tensor._api"}, "torch._inductor.config": {"torch._dynamo.config"},
             "torch.distributed._functional_collectives": {"torch.distributed.c10d_logger"},
             "a.cycle": {"b.cycle"}, "b.cycle": {"a.cycle"}}
    candidates = {"torch._dynamo", "torch._dynamo.config", "torch._dynamo.utils", "torch.distributed.fsdp",
                  "torch.distributed.tensor", "torch.distributed.tensor.parallel", "torch._inductor.config",
                  "torch.distributed._functional_collectives", "a.cycle", "b.cycle"}
    assert reaching(edges, candidates) == {
        "torch._dynamo", "torch._dynamo.config",  # config: its parent package torch._dynamo reaches it
        "torch._dynamo.utils", "torch.distributed.fsdp", "torch.distributed.tensor",
        "torch.distributed.tensor.parallel", "torch._inductor.config"}

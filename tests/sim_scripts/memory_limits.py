"""Run under `simgpu run --gpus 2 --memory-gb 1`: a simulated GPU runs out of memory as a GPU does."""
import torch

free, total = torch.cuda.mem_get_info()
assert total == 1 << 30 and 0 <= free <= total, (free, total)
small = torch.empty(1000, device="cuda")  # 4000 bytes: a 4096-byte block of a 2 MiB segment
assert (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) == (4096, 2 << 20)
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError as exc:
    text = str(exc)
    assert text.startswith("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 1.00 GiB "
                           "of which 1022.00 MiB is free."), text
else:
    raise AssertionError("2 GiB fit on a 1 GiB simulated GPU")
assert torch.cuda.memory_stats()["num_ooms"] == 1 and torch.cuda.mem_get_info()[0] >= 0

# FSDP2 frees an unsharded parameter with untyped_storage().resize_(0) and refills it the same way:
# the allocator gives the block back and charges the new size, as on CUDA.
param = torch.empty(1 << 20, device="cuda")  # 4 MiB: a large-pool block
before = torch.cuda.memory_allocated()
param.untyped_storage().resize_(0)
assert torch.cuda.memory_allocated() == before - (4 << 20), (before, torch.cuda.memory_allocated())
param.untyped_storage().resize_(4 << 20)
assert torch.cuda.memory_allocated() == before and param.device == torch.device("cuda", 0)
del param
assert torch.cuda.memory_allocated() == before - (4 << 20)
print("OK memory_limits")

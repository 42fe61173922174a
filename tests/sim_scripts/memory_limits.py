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
print("OK memory_limits")

"""Run under `simgpu run --gpus 1`: torch.cuda._sleep, the spin kernel PyTorch's own tests put on streams to
stand for compute or communication time (common_fsdp's delays, test_fully_shard_overlap.py), and
get_cycles_per_ms, which calibrates it with CUDA events. It reached torch._C._cuda_sleep, which the CPU
wheel lacks (AttributeError) and a CUDA wheel would run on a real GPU."""
import torch
from torch.testing._internal.common_utils import get_cycles_per_ms

from simgpu.cuda_sim.api import SLEEP_CYCLES_PER_MS

cycles_per_ms = get_cycles_per_ms()
assert 0 < cycles_per_ms <= SLEEP_CYCLES_PER_MS * 1.01, cycles_per_ms  # host overheads only ever lower it

start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
side = torch.cuda.Stream()
start.record()
with torch.cuda.stream(side):
    torch.cuda._sleep(int(20 * SLEEP_CYCLES_PER_MS))  # 20 ms of GPU clock on a side stream
torch.cuda.current_stream().wait_stream(side)
end.record()
end.synchronize()
elapsed = start.elapsed_time(end)
assert elapsed >= 20.0, f"a 20 ms sleep was timed at {elapsed} ms"  # a lower bound: a sleep never ends early

torch.cuda._sleep(0)
torch.cuda._sleep(-5)  # CUDA's spin loop does not run for a negative count
try:
    torch.cuda._sleep(1.5)
except TypeError as error:
    assert "cycles" in str(error), error
else:
    raise AssertionError("torch.cuda._sleep(1.5) was accepted; CUDA's binding takes an int")

print("OK cuda_sleep")

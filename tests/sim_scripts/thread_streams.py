"""Run under `simgpu run --gpus 1`: the current stream is per thread, as CUDA's is (FSDP2 under
FSDPTestMultiThread: each rank thread enters its own streams)."""
import threading

import torch

default = torch.cuda.current_stream()
side = torch.cuda.Stream()
entered, checked = threading.Event(), threading.Event()
seen: dict[str, object] = {}


def in_side_stream() -> None:
    with torch.cuda.stream(side):
        seen["inside"] = torch.cuda.current_stream()
        entered.set()
        checked.wait(60)


worker = threading.Thread(target=in_side_stream)
worker.start()
assert entered.wait(60)
seen["main"] = torch.cuda.current_stream()
checked.set()
worker.join(60)
assert seen["inside"] == side, seen
assert seen["main"] == default, f"another thread's stream leaked into this one: {seen['main']}"

print("OK thread_streams")

"""Run under `simgpu run --gpus 2 --memory-gb 1`: torch.cuda's memory history and snapshots, read the way
programs read them (torch's own _memory_viz, pickles for pytorch.org/memory_viz)."""
import pickle
import sys
import tempfile

import torch
from torch.cuda import _memory_viz

HERE = __file__
early = torch.empty(1000, device="cuda")  # allocated before recording: in the snapshot, with no stack
torch.cuda.memory._record_memory_history(max_entries=1000)
x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda:1")  # 3 MiB on GPU 1: a large-pool block
y = torch.ones(100, device="cuda")
del y
snap = torch.cuda.memory._snapshot()

# the trace: per device, CUDA's actions and fields, the allocating line of this file among the frames
gpu0, gpu1 = snap["device_traces"]
assert [e["action"] for e in gpu0] == ["alloc", "free_requested", "free_completed"], gpu0  # early's segment has room
assert [(e["action"], e["size"]) for e in gpu1] == [("segment_alloc", 20 << 20), ("alloc", 3 << 20)], gpu1
gpu1 = gpu1[1:]
for entry in gpu0 + gpu1:
    assert {"action", "addr", "size", "stream", "frames", "time_us"} <= set(entry), entry
alloc_line = next(f["line"] for f in gpu1[0]["frames"] if f["filename"] == HERE)
assert alloc_line == 13, gpu1[0]["frames"]
assert gpu0[0]["addr"] == gpu0[2]["addr"] and gpu0[0]["size"] == 400, gpu0  # the size asked for, as CUDA records it
assert not any("simgpu" in f["filename"] for e in gpu0 for f in e["frames"])

# the segments hold what the allocator reports, the early block included (with no stack)
for device in (0, 1):
    mine = [s for s in snap["segments"] if s["device"] == device]
    assert sum(s["total_size"] for s in mine) == torch.cuda.memory_reserved(device), (device, mine)
    assert sum(s["allocated_size"] for s in mine) == torch.cuda.memory_allocated(device), (device, mine)
    for s in mine:
        assert sum(b["size"] for b in s["blocks"]) == s["total_size"], s
recorded = [b for s in snap["segments"] if s["device"] == 1 for b in s["blocks"] if b["frames"]]
assert [b["size"] for b in recorded] == [3 << 20], recorded
assert torch.cuda.memory_snapshot() == snap["segments"]

# torch's own viewers take it, and the pickle loads back
assert "<html" in _memory_viz.trace_plot(snap).lower() and "<html" in _memory_viz.segment_plot(snap).lower()
with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
    torch.cuda.memory._dump_snapshot(f.name)
    assert pickle.load(open(f.name, "rb"))["device_traces"][1][-1]["size"] == 3 << 20

# an allocation that does not fit is an "oom" entry with the device's free bytes, as on CUDA
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
except torch.cuda.OutOfMemoryError:
    pass
oom = torch.cuda.memory._snapshot()["device_traces"][0][-1]
assert oom["action"] == "oom" and oom["size"] == 2 << 30 and 0 < oom["device_free"] < 1 << 30, oom

# stopping records nothing more; the old boolean form starts it again; bad arguments name themselves
torch.cuda.memory._record_memory_history(enabled=None)
z = torch.empty(10, device="cuda")
assert torch.cuda.memory._snapshot()["device_traces"] == [[], []]
torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=2, trace_alloc_record_context=True)
for _ in range(3):
    torch.empty(10, device="cuda")
assert len(torch.cuda.memory._snapshot()["device_traces"][0]) == 2  # max_entries keeps the newest
try:
    torch.cuda.memory._record_memory_history(enabled="sometimes")
except ValueError as exc:
    assert "enabled" in str(exc) and "sometimes" in str(exc), exc
else:
    raise AssertionError("enabled='sometimes' was taken")
torch.cuda.memory._record_memory_history(enabled=None)
print("OK memory_history")

"""Record what torch.cuda's memory history and snapshot give for a small training program: the field
names of each record, the allocator's trace (action, size, the program line that allocated) and the
segments. Runs on a GPU (the reference) and under `simgpu run --gpus 1` (the same json, to compare).

    python benchmarks/cuda_references/memory_history_probe.py OUT.json
"""
import json
import os
import sys

import torch

PROGRAM = os.path.abspath(__file__)


def scenario() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    for _ in range(2):
        loss = model(torch.randn(64, 256, device="cuda")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    big = torch.empty(30 << 20, dtype=torch.uint8, device="cuda")  # a segment of its own
    del big


def program_line(frames: list) -> int | None:
    """The line of this file nearest the allocation (frames are innermost first)."""
    return next((f["line"] for f in frames if f["filename"] == PROGRAM), None)


def main(out_path: str) -> None:
    torch.cuda.memory._record_memory_history(max_entries=100000)
    scenario()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    segments = [s for s in snap["segments"] if s["device"] == 0]
    trace = snap["device_traces"][0]
    keys = {"snapshot": sorted(snap), "segment": sorted({k for s in segments for k in s}),
            "block": sorted({k for s in segments for b in s["blocks"] for k in b}),
            "trace_entry": sorted({k for e in trace for k in e}),
            "frame": sorted({k for e in trace for f in e["frames"] for k in f})}
    out = {
        "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "keys": keys,
        "actions": sorted({e["action"] for e in trace}),
        # the program's own allocations and frees (the allocator's segment events are kept apart)
        "events": [[e["action"], e["size"], program_line(e["frames"])] for e in trace
                   if e["action"] in ("alloc", "free_completed")],
        "segment_events": [[e["action"], e["size"]] for e in trace if e["action"].startswith("segment")],
        "segments": sorted([s["total_size"], s["segment_type"], s["allocated_size"]] for s in segments),
        "block_states": sorted({b["state"] for s in segments for b in s["blocks"]}),
        "memory_allocated": torch.cuda.memory_allocated(), "memory_reserved": torch.cuda.memory_reserved(),
        "memory_snapshot_len": len(torch.cuda.memory_snapshot()),
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "events"}, indent=1), f"\n{len(out['events'])} events")


if __name__ == "__main__":
    main(sys.argv[1])

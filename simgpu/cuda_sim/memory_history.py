"""torch.cuda's memory history and snapshots on simulated GPUs: what pytorch.org/memory_viz reads.

Programs call `torch.cuda.memory._record_memory_history(...)`, run some steps, then
`torch.cuda.memory._dump_snapshot(path)` (or `_snapshot()`, `torch.cuda.memory_snapshot()`), and look at
the pickle in memory_viz or with `torch.cuda._memory_viz`. On CUDA these read the caching allocator's
C++ state; here they read the allocator model (memory.py), with CUDA's field names:

- While recording, every block the model hands out or takes back is a trace entry (`alloc`,
  `free_requested`, `free_completed`, `segment_alloc` when it takes a new segment, and `oom` with
  `device_free`), with the size asked for, its address, stream and time, and the program's Python stack
  (what python_frames leaves out).
- A snapshot's segments are the allocator model's, block by block (its addresses are made up, one range
  per GPU, and consistent between the trace and the segments), each allocated block with the stack that
  allocated it if that was recorded.
- Not modelled: `segment_free` entries (empty_cache), `active_awaiting_free` (record_stream), C++ frames
  (`stacks="all"` records the Python ones), compile context and annotations.
"""
from __future__ import annotations

import collections
import os
import pickle
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from simgpu.cuda_sim import memory as memory_model

_SIMGPU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MAX_FRAMES = 64


def python_frames(skip: int = 2) -> list[dict[str, Any]]:
    """The program's Python stack, innermost first, as CUDA's snapshots give it.

    Left out, since a GPU run has none of them: simgpu's own frames; the doubled frame of a torch
    function that simgpu's function mode re-enters (torch's `handle_torch_function` and its caller's
    line); and, for an allocation made while autograd runs a backward node, every frame from the
    program's `backward()` call outwards (CUDA runs backward nodes on its own device thread)."""
    frames: list[dict[str, Any]] = []
    frame = sys._getframe(skip)
    drop_next = False
    while frame is not None and len(frames) < _MAX_FRAMES:
        code = frame.f_code
        filename = code.co_filename
        if code.co_name == "_engine_run_backward" or (code.co_name == "run_backward" and filename.endswith("graph.py")):
            break
        if code.co_name == "handle_torch_function" and filename.endswith("overrides.py"):
            drop_next = True
        elif drop_next:
            drop_next = False
        elif not filename.startswith(_SIMGPU_DIR):
            frames.append({"filename": filename, "line": frame.f_lineno, "name": code.co_name})
        frame = frame.f_back
    return frames


@dataclass
class Recorder:
    """What `_record_memory_history` asked for, and what it has recorded since."""

    trace: bool                      # enabled="all": keep the trace entries (else only live blocks' stacks)
    alloc_stacks: bool               # context in ("state", "alloc", "all"): stacks of live blocks and allocs
    free_stacks: bool                # context == "all": stacks of frees too
    max_entries: int
    entries: dict[int, collections.deque] = field(default_factory=dict)        # device -> trace entries
    frames: dict[memory_model.Block, list] = field(default_factory=dict)        # a live block -> its allocation's stack
    lock: Any = field(default_factory=threading.RLock)  # re-entered by a finalizer the collector runs

    def _entry(self, index: int, entry: dict[str, Any]) -> None:
        if self.trace:
            entries = self.entries.get(index)
            if entries is None:
                entries = self.entries[index] = collections.deque(maxlen=self.max_entries)
            entries.append(entry)

    def allocate(self, memory: memory_model.DeviceMemory, nbytes: int, stream: int) -> memory_model.Block | None:
        """memory.allocate, traced: the segment it adds (`segment_alloc`), the block (`alloc`), or its `oom`."""
        segments = len(memory.segments)
        try:
            block = memory.allocate(nbytes, stream)
        except torch.cuda.OutOfMemoryError:
            with self.lock:
                self._entry(memory.index, {**_trace_entry("oom", 0, nbytes, stream, python_frames(2)),
                                           "device_free": max(memory.limit - memory.total_reserved(), 0)})
            raise
        if block is None:
            return None
        frames = python_frames(2) if self.alloc_stacks else []
        with self.lock:
            if len(memory.segments) > segments:
                head = block if block.prev is None else _segment_head(block)
                size = sum(one.size for one in _chain(head))
                self._entry(memory.index, _trace_entry("segment_alloc", head.addr, size, stream, frames))
            self.frames[block] = frames
            self._entry(memory.index, _trace_entry("alloc", block.addr, nbytes, stream, frames))
        return block

    def free(self, index: int, block: memory_model.Block, nbytes: int, stream: int) -> None:
        """Before the block goes back (its address is still its own): `free_requested` and `free_completed`."""
        frames = python_frames(2) if self.free_stacks else []
        with self.lock:
            self.frames.pop(block, None)
            for action in ("free_requested", "free_completed"):  # no stream keeps it: freed at once
                self._entry(index, _trace_entry(action, block.addr, nbytes, stream, frames))


def _segment_head(block: memory_model.Block) -> memory_model.Block:
    while block.prev is not None:
        block = block.prev
    return block


def _chain(block: memory_model.Block | None) -> Any:
    while block is not None:
        yield block
        block = block.next


recorder: Recorder | None = None  # set while recording; devices.py looks at it on every allocation


def _trace_entry(action: str, addr: int, nbytes: int, stream: int, frames: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry of a device's trace, with CUDA's fields; its size is the size asked for (not the block's)."""
    return {"action": action, "addr": addr, "size": nbytes, "stream": stream, "frames": frames,
            "time_us": time.time_ns() // 1000, "compile_context": "", "user_metadata": ""}


def record_memory_history(enabled: Any = "all", context: Any = "all", stacks: str = "all",
                          max_entries: int = sys.maxsize, device: Any = None, clear_history: bool = False,
                          **ignored: Any) -> None:
    """torch.cuda.memory._record_memory_history: start (enabled="all" or "state") or stop (None) recording.
    The old boolean form (`_record_memory_history(True, trace_alloc_max_entries=N, ...)`) is taken too."""
    global recorder
    if isinstance(enabled, bool):  # torch's legacy signature
        max_entries = ignored.get("trace_alloc_max_entries", 1)
        context = "all" if ignored.get("trace_alloc_record_context", False) else "state"
        enabled = "all" if enabled else None
    if enabled not in (None, "state", "all"):
        raise ValueError(f"_record_memory_history: enabled must be None, 'state' or 'all', not {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"_record_memory_history: context must be None, 'state', 'alloc' or 'all', not {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"_record_memory_history: stacks must be 'python' or 'all', not {stacks!r}")
    old = recorder
    if enabled is None:
        recorder = None
        return
    new = Recorder(trace=enabled == "all", alloc_stacks=context is not None, free_stacks=context == "all",
                   max_entries=max(int(max_entries), 1))
    if old is not None and not clear_history:
        new.entries = {index: collections.deque(entries, maxlen=new.max_entries)
                       for index, entries in old.entries.items()}
        new.frames = old.frames
    recorder = new


def snapshot(device: Any = None, **ignored: Any) -> dict[str, Any]:
    """torch.cuda.memory._snapshot: every simulated GPU's segments, and the recorded trace per device."""
    from simgpu.cuda_sim import devices

    memories = devices.table().memory
    current = recorder
    segments = [segment for memory in memories for segment in _segments(memory, current)]
    traces = [list(current.entries.get(memory.index, ())) if current is not None else [] for memory in memories]
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                                   "max_split_size": -1, "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False, "pinned_num_register_threads": 1,
                                   "release_lock_on_malloc": False, "pinned_use_host_register": False,
                                   "roundup_power2_divisions": {}},
            "external_annotations": []}


def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """torch.cuda.memory_snapshot: the segments of every simulated GPU."""
    return snapshot()["segments"]


def dump_snapshot(filename: str = "dump_snapshot.pickle", **ignored: Any) -> None:
    """torch.cuda.memory._dump_snapshot: the snapshot, pickled, for pytorch.org/memory_viz."""
    with open(filename, "wb") as out:
        pickle.dump(snapshot(), out)


def _segments(memory: memory_model.DeviceMemory, current: Recorder | None) -> list[dict[str, Any]]:
    """The allocator model's segments with their blocks, as CUDA's snapshot lists them."""
    frames = current.frames if current is not None else {}
    out: list[dict[str, Any]] = []
    for blocks in memory.segment_blocks():
        head = blocks[0]
        listed = [{"address": b.addr, "size": b.size, "requested_size": b.requested if b.allocated else 0,
                   "state": "active_allocated" if b.allocated else "inactive", "frames": frames.get(b, [])}
                  for b in blocks]
        used = sum(b.size for b in blocks if b.allocated)
        out.append({"device": memory.index, "address": head.addr, "total_size": sum(b.size for b in blocks),
                    "stream": head.stream, "segment_type": "large" if head.pool else "small",
                    "segment_pool_id": (0, 0), "allocated_size": used, "active_size": used,
                    "requested_size": sum(b["requested_size"] for b in listed), "is_expandable": False,
                    "frames": [], "blocks": listed})
    return out


TORCH_CUDA_MEMORY = {"_record_memory_history": record_memory_history, "_snapshot": snapshot,
                     "_dump_snapshot": dump_snapshot, "memory_snapshot": memory_snapshot}

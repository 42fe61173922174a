"""torch.cuda's memory history and snapshots on simulated GPUs: what pytorch.org/memory_viz reads.

Programs call `torch.cuda.memory._record_memory_history(...)`, run some steps, then
`torch.cuda.memory._dump_snapshot(path)` (or `_snapshot()`, `torch.cuda.memory_snapshot()`), and look at
the pickle in memory_viz or with `torch.cuda._memory_viz`. On CUDA these read the caching allocator's
C++ state; here they read the allocator model (memory.py), with CUDA's field names:

- While recording, every block the model charges or frees is a trace entry (`alloc`, `free_requested`,
  `free_completed`, `segment_alloc` when it takes a new segment, and `oom` with `device_free`), with the
  size asked for, its stream, the time, and the program's Python stack (what python_frames leaves out). A block's address is its storage's host
  address: unique while the block lives, as a GPU address is.
- A snapshot's segments are the model's segments (their sizes, pools and streams). The model keeps the
  bytes in use per pool and stream, not block lists, so which segment holds which block is laid out
  here: the recorded live blocks (with their stacks) first-fit into the segments of their pool and
  stream, then the bytes in use that no recorded block accounts for (all of them when nothing was
  recorded) fill the space left, one block per segment. The rest of a segment is one inactive block. Segment and block addresses are made up but unique.
- Not modelled: `segment_free` entries (empty_cache), `active_awaiting_free` (record_stream), segment addresses in trace entries,
  C++ frames (`stacks="all"` records the Python ones), compile context and annotations.
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
_SEGMENT_BASE = 0x7F00_0000_0000  # made-up segment addresses start here, one range per device
_DEVICE_SPAN = 1 << 40


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
class _LiveBlock:
    size: int
    requested_size: int
    stream: int
    frames: list[dict[str, Any]]


@dataclass
class Recorder:
    """What `_record_memory_history` asked for, and what it has recorded since."""

    trace: bool                      # enabled="all": keep the trace entries (else only live blocks' stacks)
    alloc_stacks: bool               # context in ("state", "alloc", "all"): stacks of live blocks and allocs
    free_stacks: bool                # context == "all": stacks of frees too
    max_entries: int
    entries: dict[int, collections.deque] = field(default_factory=dict)       # device -> trace entries
    live: dict[int, dict[int, _LiveBlock]] = field(default_factory=dict)     # device -> addr -> block
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _entry(self, index: int, entry: dict[str, Any]) -> None:
        if self.trace:
            entries = self.entries.get(index)
            if entries is None:
                entries = self.entries[index] = collections.deque(maxlen=self.max_entries)
            entries.append(entry)

    def allocate(self, memory: memory_model.DeviceMemory, nbytes: int, stream: int) -> int:
        """memory.allocate, with the segment it adds (`segment_alloc`) or its OOM (`oom`) traced."""
        reserved = memory.total_reserved()
        try:
            block = memory.allocate(nbytes, stream)
        except torch.cuda.OutOfMemoryError:
            self.oom(memory.index, nbytes, stream, max(memory.limit - memory.total_reserved(), 0))
            raise
        grown = memory.total_reserved() - reserved
        if grown > 0:
            with self.lock:
                self._entry(memory.index, _trace_entry("segment_alloc", 0, grown, stream, python_frames(3)))
        return block

    def alloc(self, index: int, addr: int, block: int, nbytes: int, stream: int) -> None:
        frames = python_frames(3) if self.alloc_stacks else []
        with self.lock:
            self.live.setdefault(index, {})[addr] = _LiveBlock(block, nbytes, stream, frames)
            self._entry(index, _trace_entry("alloc", addr, nbytes, stream, frames))

    def free(self, index: int, addr: int, nbytes: int, stream: int) -> None:
        frames = python_frames(3) if self.free_stacks else []
        with self.lock:
            self.live.get(index, {}).pop(addr, None)
            for action in ("free_requested", "free_completed"):  # no stream keeps it: freed at once
                self._entry(index, _trace_entry(action, addr, nbytes, stream, frames))

    def oom(self, index: int, nbytes: int, stream: int, device_free: int) -> None:
        with self.lock:
            self._entry(index, {**_trace_entry("oom", 0, nbytes, stream, python_frames(3)), "device_free": device_free})


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
        new.live = old.live
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
    live = sorted(current.live.get(memory.index, {}).items()) if current is not None else []
    out: list[dict[str, Any]] = []
    next_address = _SEGMENT_BASE + memory.index * _DEVICE_SPAN
    for (pool, stream), sizes in sorted(memory.segment_sizes.items()):
        # the recorded live blocks of this pool and stream, first-fit; then the bytes in use that no
        # recorded block accounts for (allocated before recording began), in the space left, in order
        mine = [block for _, block in live if block.stream == stream and (block.size > memory_model.SMALL_SIZE) == bool(pool)]
        placed: list[list[_LiveBlock]] = [[] for _ in sizes]
        room = list(sizes)
        for block in mine:
            for i, free in enumerate(room):
                if block.size <= free:
                    placed[i].append(block)
                    room[i] -= block.size
                    break
        unknown = max(memory.allocated.get((pool, stream), 0) - sum(b.size for blocks in placed for b in blocks), 0)
        for i, size in enumerate(sizes):
            blocks: list[dict[str, Any]] = []
            used = 0
            for block in placed[i]:
                blocks.append({"address": next_address + used, "size": block.size, "requested_size": block.requested_size,
                               "state": "active_allocated", "frames": block.frames})
                used += block.size
            anonymous = min(unknown, size - used)
            if anonymous:
                blocks.append({"address": next_address + used, "size": anonymous, "requested_size": anonymous,
                               "state": "active_allocated", "frames": []})
                used += anonymous
                unknown -= anonymous
            if size > used:
                blocks.append({"address": next_address + used, "size": size - used, "requested_size": 0,
                               "state": "inactive", "frames": []})
            requested = sum(block["requested_size"] for block in blocks)
            out.append({"device": memory.index, "address": next_address, "total_size": size, "stream": stream,
                        "segment_type": "large" if pool else "small", "segment_pool_id": (0, 0),
                        "allocated_size": used, "active_size": used, "requested_size": requested,
                        "is_expandable": False, "frames": [], "blocks": blocks})
            next_address += size
    return out


TORCH_CUDA_MEMORY = {"_record_memory_history": record_memory_history, "_snapshot": snapshot,
                     "_dump_snapshot": dump_snapshot, "memory_snapshot": memory_snapshot}

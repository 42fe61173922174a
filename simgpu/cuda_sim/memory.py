"""Simulated GPU memory that behaves like a GPU's: a capacity, CUDA's caching-allocator rounding, OOM.

Every storage on a simulated GPU is charged what PyTorch's CUDA caching allocator would charge it
(c10/cuda/CUDACachingAllocator.cpp): a block rounded up to 512 bytes; blocks of at most 1 MiB come
from 2 MiB segments (the small pool), larger ones from 20 MiB segments when under 10 MiB, else from a
segment of their own size rounded up to 2 MiB (the large pool). A freed block stays reserved (cached)
for the next allocation of its pool; `empty_cache` gives back the segments no block uses. The model keeps
one free-byte count per pool and the segments' sizes instead of the allocator's block lists (no
fragmentation, and which segment holds which block is not known to empty_cache): reserved memory
is what the segments hold, allocated memory the blocks in use, and their peaks are the allocator's
within the rounding of one segment per pool and stream. A large block whose fresh segment would keep no
more than 1 MiB beside it is given the whole segment (the allocator splits large blocks only above that).
Library workspaces (cuBLAS, cuBLASLt) are charged by workspaces.py.

An allocation whose segment would take the device's reserved memory past its capacity first frees
the cache (as the allocator retries after release_cached_blocks), then raises
torch.cuda.OutOfMemoryError with CUDA's message. Capacity: SIMGPU_GPU_MEMORY_GB (`simgpu run
--memory-gb`), else what the host holds divided among the simulated GPUs (at most an H200's 141 GiB),
times set_per_process_memory_fraction. Since simulated GPU memory is host memory, the host is watched
too: when this process has grown by HOST_CHECK_BYTES since the last look and the host has less than
a reserve left, HostMemoryExhausted (one line) stops the program before the kernel's OOM killer does.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from simgpu.cuda_sim.errors import SimulationError

MIN_BLOCK = 512                 # kMinBlockSize
SMALL_SIZE = 1 << 20            # kSmallSize: blocks up to this come from the small pool
SMALL_BUFFER = 2 << 20          # kSmallBuffer: a small-pool segment
LARGE_BUFFER = 20 << 20         # kLargeBuffer: a large-pool segment for blocks under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20      # kMinLargeAlloc
ROUND_LARGE = 2 << 20           # kRoundLarge: larger blocks get a segment of their size rounded to this
DEFAULT_CAP_GB = 141            # an H200: the most a simulated GPU reports by default
HOST_CHECK_BYTES = 256 << 20    # look at the host's free memory after this much growth
_GIB = 1 << 30


class HostMemoryExhausted(SimulationError):
    """The host is about to run out of memory (simulated GPU memory lives there): stop in one line."""


def round_size(nbytes: int) -> int:
    """The block the caching allocator hands out for a request (0 bytes: none)."""
    if nbytes <= 0:
        return 0
    return MIN_BLOCK * -(-nbytes // MIN_BLOCK)


def segment_size(block: int) -> int:
    """The segment cudaMalloc'd when no cached block of the pool fits (get_allocation_size)."""
    if block <= SMALL_SIZE:
        return SMALL_BUFFER
    if block < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * -(-block // ROUND_LARGE)


def _pool(block: int) -> int:
    return 0 if block <= SMALL_SIZE else 1


POOL_NAMES = ("small_pool", "large_pool")  # c10's StatType order after "all"
TRACKED = ("allocation", "allocated_bytes", "requested_bytes", "segment", "reserved_bytes")
ALIASES = {"active": "allocation", "active_bytes": "allocated_bytes"}  # no block is freed while a stream uses it
UNMODELLED = ("inactive_split", "inactive_split_bytes")  # split blocks' free tails: no fragmentation model


class Stat:
    """c10's Stat: a current value, its peak, and the running sums of what was added and taken away.
    (A plain class with slots: the allocator updates six of these per allocation, on every op's path.)"""

    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def grow(self, amount: int) -> None:
        self.allocated += amount
        self.current += amount
        if self.current > self.peak:
            self.peak = self.current

    def shrink(self, amount: int) -> None:
        self.freed += amount
        self.current -= amount


def _stats_row() -> list[Stat]:
    return [Stat(), Stat(), Stat()]  # all, small pool, large pool


@dataclass
class DeviceMemory:
    """One simulated GPU's allocator state (per process, as each process has its own allocator).

    Blocks and segments are counted per (pool, stream): the caching allocator never hands a block cached
    for one stream to an allocation on another, so a side stream (FSDP's all-gathers, a prefetch stream)
    grows segments of its own. `stat` keeps c10's DeviceStats (all / small pool / large pool), which
    memory_stats, memory_summary and the peaks read."""

    index: int
    capacity: int
    fraction: float = 1.0
    allocated: dict[tuple[int, int], int] = field(default_factory=dict)  # (pool, stream) -> blocks in use
    reserved: dict[tuple[int, int], int] = field(default_factory=dict)   # (pool, stream) -> segments' bytes
    segment_sizes: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (pool, stream) -> segments
    stat: dict[str, list[Stat]] = field(default_factory=lambda: {name: _stats_row() for name in TRACKED})
    retries: int = 0
    ooms: int = 0
    stream_syncs: int = 0  # releasing cached blocks synchronizes every stream first

    def __post_init__(self) -> None:
        self._rows = (self._block_rows(0), self._block_rows(1))  # the Stats a block of each pool updates

    @property
    def limit(self) -> int:
        return int(self.capacity * self.fraction)

    @property
    def peak_allocated(self) -> int:
        return self.stat["allocated_bytes"][0].peak

    @property
    def peak_reserved(self) -> int:
        return self.stat["reserved_bytes"][0].peak

    def total_allocated(self) -> int:
        return self.stat["allocated_bytes"][0].current

    def total_reserved(self) -> int:
        return self.stat["reserved_bytes"][0].current

    def _count(self, name: str, pool: int, amount: int) -> None:
        row = self.stat[name]
        for one in (row[0], row[1 + pool]):
            if amount >= 0:
                one.grow(amount)
            else:
                one.shrink(-amount)

    def _block_rows(self, pool: int) -> tuple[Stat, ...]:
        """allocation, allocated_bytes and requested_bytes: all, then the pool's (each block's six updates)."""
        return tuple(self.stat[name][column] for name in ("allocation", "allocated_bytes", "requested_bytes")
                     for column in (0, 1 + pool))

    def allocate(self, nbytes: int, stream: int = 0) -> int:
        """Charge a request of nbytes on a stream; the block size to give back on free (OutOfMemoryError if
        it cannot fit)."""
        block = round_size(nbytes)
        if block == 0:
            return 0
        key = (_pool(block), stream)
        if self.reserved.get(key, 0) - self.allocated.get(key, 0) < block:
            grow = segment_size(block)
            if self.total_reserved() + grow > self.limit:
                self.retries += 1
                self.empty_cache()
                if self.total_reserved() + grow > self.limit:
                    self.ooms += 1
                    raise torch.cuda.OutOfMemoryError(self._oom_message(block))
            self.reserved[key] = self.reserved.get(key, 0) + grow
            self.segment_sizes.setdefault(key, []).append(grow)
            self._count("segment", key[0], 1)
            self._count("reserved_bytes", key[0], grow)
            if key[0] == 1 and grow - block <= SMALL_SIZE:
                block = grow  # a large-pool block is split only when more than 1 MiB would remain
        self.allocated[key] = self.allocated.get(key, 0) + block
        count, count_pool, size, size_pool, asked, asked_pool = self._rows[key[0]]
        count.grow(1)
        count_pool.grow(1)
        size.grow(block)
        size_pool.grow(block)
        asked.grow(nbytes)
        asked_pool.grow(nbytes)
        return block

    def free(self, block: int, nbytes: int, stream: int = 0) -> None:
        if block:
            pool = _pool(block)
            self.allocated[(pool, stream)] -= block
            count, count_pool, size, size_pool, asked, asked_pool = self._rows[pool]
            count.shrink(1)
            count_pool.shrink(1)
            size.shrink(block)
            size_pool.shrink(block)
            asked.shrink(nbytes)
            asked_pool.shrink(nbytes)

    def empty_cache(self) -> None:
        """Give back the segments no block uses. Which segments hold the blocks in use is not modelled: the
        smallest one that can hold them all, else the largest ones until they fit."""
        self.stream_syncs += 1
        for key, sizes in self.segment_sizes.items():
            kept = _segments_holding(sorted(sizes), self.allocated.get(key, 0))
            if len(kept) < len(sizes):
                self._count("segment", key[0], len(kept) - len(sizes))
                self._count("reserved_bytes", key[0], sum(kept) - self.reserved[key])
                self.segment_sizes[key] = kept
                self.reserved[key] = sum(kept)

    def reset_peaks(self) -> None:
        """torch.cuda.reset_peak_memory_stats: every peak back to its current value."""
        for row in self.stat.values():
            for one in row:
                one.peak = one.current

    def reset_accumulated(self) -> None:
        """torch.cuda.reset_accumulated_memory_stats: the running sums and event counts back to 0."""
        for row in self.stat.values():
            for one in row:
                one.allocated = one.freed = 0
        self.retries = self.ooms = self.stream_syncs = 0

    def stats(self) -> dict[str, int]:
        """torch.cuda.memory_stats: every key CUDA's allocator reports, from this model (split blocks'
        free tails and oversize blocks are not modelled: 0)."""
        out = {"num_alloc_retries": self.retries, "num_ooms": self.ooms, "max_split_size": -1,
               "num_sync_all_streams": self.stream_syncs, "num_device_alloc": self.stat["segment"][0].allocated,
               "num_device_free": self.stat["segment"][0].freed}
        rows = {**{name: self.stat[name] for name in TRACKED}, **{name: self.stat[real] for name, real in ALIASES.items()},
                **{name: _stats_row() for name in UNMODELLED}}
        for name, row in rows.items():
            for pool_name, one in zip(("all", *POOL_NAMES), row):
                for field_name in ("current", "peak", "allocated", "freed"):
                    out[f"{name}.{pool_name}.{field_name}"] = getattr(one, field_name)
        for name in ("oversize_allocations", "oversize_segments"):
            out.update({f"{name}.{field_name}": 0 for field_name in ("current", "peak", "allocated", "freed")})
        return out

    def _oom_message(self, block: int) -> str:
        """CUDA's message (CUDACachingAllocator.cpp, torch 2.x), with this simulated GPU's numbers."""
        free = max(self.limit - self.total_reserved(), 0)
        allocated, reserved = self.total_allocated(), self.total_reserved()
        return (f"CUDA out of memory. Tried to allocate {format_size(block)}. GPU {self.index} has a total capacity "
                f"of {format_size(self.limit)} of which {format_size(free)} is free. Including non-PyTorch memory, "
                f"this process has {format_size(reserved)} memory in use. Of the allocated memory "
                f"{format_size(allocated)} is allocated by PyTorch, and {format_size(reserved - allocated)} is "
                "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables) "
                f"(simgpu: simulated GPU of {format_size(self.capacity)}; simgpu run --memory-gb sets it)")


def _segments_holding(sizes: list[int], in_use: int) -> list[int]:
    """The segments (sizes ascending) kept for `in_use` bytes of blocks: none, the smallest that holds them,
    else the largest ones until they do."""
    if in_use == 0:
        return []
    for size in sizes:
        if size >= in_use:
            return [size]
    kept: list[int] = []
    for size in reversed(sizes):
        kept.append(size)
        if sum(kept) >= in_use:
            break
    return kept


def format_size(nbytes: int) -> str:
    """c10's format_size: bytes, KiB, MiB or GiB with two decimals."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20)):
        if nbytes < scale << 10:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes / _GIB:.2f} GiB"


# ----------------------------------------------------------------------------- the host
def host_limit_bytes() -> int:
    """What this host (its cgroup, if it has a limit) can hold in memory: the smaller of MemTotal and memory.max."""
    total = _meminfo().get("MemTotal", 0)
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            text = f.read().strip()
        if text.isdigit():
            total = min(total, int(text)) if total else int(text)
    except OSError:
        pass
    return total or DEFAULT_CAP_GB * _GIB


def host_available_bytes() -> int | None:
    """Memory the host can still give (MemAvailable, less if the cgroup's limit is nearer); None: unknown."""
    available = _meminfo().get("MemAvailable")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit.isdigit():
            left = int(limit) - used
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[name] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def default_capacity(gpus: int) -> int:
    """Each simulated GPU's memory when none is asked for: the host's share, at most an H200's."""
    return min(DEFAULT_CAP_GB * _GIB, host_limit_bytes() // max(gpus, 1))


class HostGuard:
    """Looks at the host's free memory after every HOST_CHECK_BYTES of growth in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since = 0
        self.reserve = min(1 << 30, host_limit_bytes() // 20)  # 5% of the host, at most 1 GiB

    def grew(self, nbytes: int) -> None:
        with self._lock:
            self._since += nbytes
            if self._since < HOST_CHECK_BYTES:
                return
            self._since = 0
        available = host_available_bytes()
        if available is not None and available < self.reserve:
            raise HostMemoryExhausted(
                f"simgpu: the host has {format_size(max(available, 0))} of memory left (simulated GPU memory is "
                f"host memory); stopping before the kernel's OOM killer does. Give the simulated GPUs less "
                f"(simgpu run --memory-gb) or run fewer ranks")

"""Simulated GPU memory that behaves like a GPU's: a capacity, CUDA's caching-allocator rounding, OOM.

Every storage on a simulated GPU gets a block from a model of PyTorch's CUDA caching allocator
(c10/cuda/CUDACachingAllocator.cpp, default settings), which runs the allocator's own algorithm on
made-up addresses: a request rounded up to 512 bytes; blocks of at most 1 MiB from 2 MiB segments (the
small pool), larger ones from 20 MiB segments when under 10 MiB, else from a segment of their own size
rounded up to 2 MiB (the large pool); the smallest cached block of the pool and stream that fits; a
block split when the rest would be at least 512 bytes (small pool) or more than 1 MiB (large pool); a
freed block merged with its free neighbours; `empty_cache` giving back the segments that are one free
block. So reserved memory, its segments and their fragmentation are a GPU's (held to an H200 by
tests/test_allocator_reference.py and tests/test_memory_history.py). Not modelled: expandable
segments and the other PYTORCH_CUDA_ALLOC_CONF settings, and blocks kept by record_stream.
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

import bisect
import re
import threading
from typing import Any, Callable

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


POOL_NAMES = ("small_pool", "large_pool")  # c10's StatType order after "all"
TRACKED = ("allocation", "allocated_bytes", "requested_bytes", "segment", "reserved_bytes", "inactive_split",
           "inactive_split_bytes")
ALIASES = {"active": "allocation", "active_bytes": "allocated_bytes"}  # no block is freed while a stream uses it


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


class Block:
    """One block of a segment, as CUDACachingAllocator.cpp's Block: its size and address, whether it is in
    use, and its neighbours in the segment (a segment is a chain of blocks; free neighbours merge)."""

    __slots__ = ("size", "addr", "pool", "stream", "prev", "next", "allocated", "requested")

    def __init__(self, size: int, addr: int, pool: int, stream: int) -> None:
        self.size, self.addr, self.pool, self.stream = size, addr, pool, stream
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False
        self.requested = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        return f"Block(size={self.size}, addr={self.addr:#x}, {'allocated' if self.allocated else 'free'})"


_ADDRESS_BASE = 0x7F00_0000_0000   # made-up device addresses: each GPU's segments are laid out from here
_DEVICE_SPAN = 1 << 40


class DeviceMemory:
    """One simulated GPU's caching allocator (per process, as each process has its own allocator).

    The allocator's own algorithm (c10/cuda/CUDACachingAllocator.cpp, default settings): a request is
    rounded to 512 bytes and served from the smallest free block of its pool (small: blocks up to
    1 MiB; large) and stream that fits, else from a new segment (2 MiB; 20 MiB under 10 MiB; else its
    size rounded to 2 MiB); the block is split when the rest would be 512 bytes or more (small pool)
    or more than 1 MiB (large pool); a freed block merges with free neighbours of its segment;
    empty_cache gives back the segments that are one free block. So segments, fragmentation and the
    reserved memory follow a GPU's. `stat` keeps c10's DeviceStats (all / small pool / large pool),
    which memory_stats, memory_summary and the peaks read."""

    def __init__(self, index: int, capacity: int, fraction: float = 1.0) -> None:
        self.index, self.capacity, self.fraction = index, capacity, fraction
        self.stat: dict[str, list[Stat]] = {name: _stats_row() for name in TRACKED}
        self.retries = self.ooms = 0
        self.stream_syncs = 0  # releasing cached blocks synchronizes every stream first
        self.free_blocks: dict[tuple[int, int], list[tuple[int, int, Block]]] = {}  # (pool, stream) -> (size, addr, block), sorted
        self.segments: dict[int, Block] = {}  # a segment's address -> its first block
        self._next_address = _ADDRESS_BASE + index * _DEVICE_SPAN
        self._lock = threading.Lock()
        self._holder: int | None = None                   # the thread inside allocate or free, if any
        self._deferred: list[tuple[Block, int]] = []        # frees that came in meanwhile (garbage collection)
        self._rows = (self._block_rows(0), self._block_rows(1))  # the Stats a block of each pool updates
        self._split_rows = tuple(tuple(self.stat[name][column] for name in ("inactive_split", "inactive_split_bytes")
                                       for column in (0, 1 + pool)) for pool in (0, 1))

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

    def _split_changed(self, pool: int, blocks: int, nbytes: int) -> None:
        """inactive_split and inactive_split_bytes (all, and the pool's) change by these net amounts."""
        for one, amount in zip(self._split_rows[pool], (blocks, blocks, nbytes, nbytes)):
            if amount > 0:
                one.allocated += amount
                one.current += amount
                if one.current > one.peak:
                    one.peak = one.current
            elif amount < 0:
                one.freed -= amount
                one.current += amount

    def _block_rows(self, pool: int) -> tuple[Stat, ...]:
        """allocation, allocated_bytes and requested_bytes: all, then the pool's (each block's six updates)."""
        return tuple(self.stat[name][column] for name in ("allocation", "allocated_bytes", "requested_bytes")
                     for column in (0, 1 + pool))

    def allocate(self, nbytes: int, stream: int = 0) -> Block | None:
        """The block a request of nbytes on a stream gets (None for 0 bytes, as CUDA allocates nothing);
        OutOfMemoryError when no segment can be had, after giving the cache back once."""
        size = round_size(nbytes)
        if size == 0:
            return None
        return self._locked(self._allocate, nbytes, size, 0 if size <= SMALL_SIZE else 1, stream)

    def _locked(self, work: Callable[..., Any], *args: Any) -> Any:
        """work(*args) under the lock, with this thread marked as its holder: a free that the garbage collector
        runs meanwhile on this thread is deferred (see free), and done before the lock is given back."""
        with self._lock:
            self._holder = threading.get_ident()
            try:
                return work(*args)
            finally:
                self._run_deferred()

    def _allocate(self, nbytes: int, size: int, pool: int, stream: int) -> Block:
        free = self.free_blocks.get((pool, stream))
        i = bisect.bisect_left(free, (size, 0)) if free else 0
        block = free.pop(i)[2] if free and i < len(free) else self._new_segment(pool, stream, size)
        already_split = block.prev is not None or block.next is not None
        remaining = block.size - size
        if remaining >= MIN_BLOCK if pool == 0 else remaining > SMALL_SIZE:
            rest = Block(remaining, block.addr + size, pool, stream)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            bisect.insort(self.free_blocks.setdefault((pool, stream), []), (remaining, rest.addr, rest))
            if already_split:  # an inactive split block shrinks by what is taken
                self._split_changed(pool, 0, -size)
            else:  # a new inactive split block: the rest of a block that was whole
                self._split_changed(pool, 1, remaining)
        elif already_split:  # an inactive split block becomes active whole
            self._split_changed(pool, -1, -block.size)
        block.allocated, block.requested = True, nbytes
        count, count_pool, allocated, allocated_pool, asked, asked_pool = self._rows[pool]
        count.grow(1)
        count_pool.grow(1)
        allocated.grow(block.size)
        allocated_pool.grow(block.size)
        asked.grow(nbytes)
        asked_pool.grow(nbytes)
        return block

    def _new_segment(self, pool: int, stream: int, size: int) -> Block:
        grow = segment_size(size)
        if self.total_reserved() + grow > self.limit:
            self.retries += 1
            self._release_cached()
            if self.total_reserved() + grow > self.limit:
                self.ooms += 1
                raise torch.cuda.OutOfMemoryError(self._oom_message(size))
        block = Block(grow, self._next_address, pool, stream)
        self._next_address += grow
        self.segments[block.addr] = block
        self._count("segment", pool, 1)
        self._count("reserved_bytes", pool, grow)
        return block

    def free(self, block: Block | None, nbytes: int, stream: int = 0) -> None:
        """Give a block back to its pool's cache, merged with its free neighbours (free_block)."""
        if block is None:
            return
        if self._holder == threading.get_ident():
            # this thread is inside allocate or free already: a storage's finalizer run by the garbage
            # collector in the middle of it. The block goes back once that call is done (a lock taken
            # again here would never be given).
            self._deferred.append((block, nbytes))
            return
        self._locked(self._free, block, nbytes)

    def _run_deferred(self) -> None:
        """The frees that came in during this thread's allocate or free; then the lock is nobody's."""
        try:
            while self._deferred:
                self._free(*self._deferred.pop())
        finally:
            self._holder = None

    def _free(self, block: Block, nbytes: int) -> None:
        pool = block.pool
        count, count_pool, allocated, allocated_pool, asked, asked_pool = self._rows[pool]
        count.shrink(1)
        count_pool.shrink(1)
        allocated.shrink(block.size)
        allocated_pool.shrink(block.size)
        asked.shrink(nbytes)
        asked_pool.shrink(nbytes)
        block.allocated = False
        free = self.free_blocks.setdefault((pool, block.stream), [])
        blocks_change = bytes_change = 0  # inactive split blocks, applied once as CUDA's free_block does
        for neighbour in (block.prev, block.next):
            if neighbour is None or neighbour.allocated:
                continue
            del free[bisect.bisect_left(free, (neighbour.size, neighbour.addr))]
            blocks_change -= 1
            bytes_change -= neighbour.size
            if neighbour is block.prev:  # the merged block starts where its free predecessor did
                block.addr, block.prev = neighbour.addr, neighbour.prev
                if block.prev is not None:
                    block.prev.next = block
                else:  # the predecessor was the segment's first block
                    self.segments[block.addr] = block
            else:
                block.next = neighbour.next
                if block.next is not None:
                    block.next.prev = block
            block.size += neighbour.size
        bisect.insort(free, (block.size, block.addr, block))
        if block.prev is not None or block.next is not None:
            blocks_change += 1
            bytes_change += block.size
        if blocks_change or bytes_change:
            self._split_changed(pool, blocks_change, bytes_change)

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache: give back every segment that is one free block (release_cached_blocks)."""
        self._locked(self._release_cached)

    def _release_cached(self) -> None:
        self.stream_syncs += 1
        for key, free in self.free_blocks.items():
            kept = []
            for entry in free:
                block = entry[2]
                if block.is_split():
                    kept.append(entry)
                    continue
                del self.segments[block.addr]
                self._count("segment", key[0], -1)
                self._count("reserved_bytes", key[0], -block.size)
            free[:] = kept

    def segment_blocks(self) -> list[list[Block]]:
        """Every segment's blocks, in address order (what torch.cuda.memory_snapshot lays out)."""
        out = []
        for addr in sorted(self.segments):
            blocks, block = [], self.segments[addr]
            while block is not None:
                blocks.append(block)
                block = block.next
            out.append(blocks)
        return out

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
        """torch.cuda.memory_stats: every key CUDA's allocator reports, from this model (oversize blocks,
        which need max_split_size set, are 0)."""
        out = {"num_alloc_retries": self.retries, "num_ooms": self.ooms, "max_split_size": -1,
               "num_sync_all_streams": self.stream_syncs, "num_device_alloc": self.stat["segment"][0].allocated,
               "num_device_free": self.stat["segment"][0].freed}
        rows = {**{name: self.stat[name] for name in TRACKED}, **{name: self.stat[real] for name, real in ALIASES.items()}}
        for name, row in rows.items():
            for pool_name, one in zip(("all", *POOL_NAMES), row):
                for field_name in ("current", "peak", "allocated", "freed"):
                    out[f"{name}.{pool_name}.{field_name}"] = getattr(one, field_name)
        for name in ("oversize_allocations", "oversize_segments"):
            out.update({f"{name}.{field_name}": 0 for field_name in ("current", "peak", "allocated", "freed")})
        return out

    def refused_by_host(self, exc: RuntimeError) -> torch.cuda.OutOfMemoryError | None:
        """CUDA's OutOfMemoryError for a request that the host's allocator refused before it was charged here
        (one tensor larger than the host's memory, as an OOM guard or a batch-size finder asks for), when this
        GPU could not hold it either; None otherwise (the host's own shortage, or another error)."""
        found = _HOST_REFUSED.search(str(exc))
        if found is None:
            return None
        size = round_size(int(found[1]))
        with self._lock:
            if self.total_reserved() + segment_size(size) <= self.limit:
                return None
            self.ooms += 1
            return torch.cuda.OutOfMemoryError(self._oom_message(size))

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


_HOST_REFUSED = re.compile(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes")


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

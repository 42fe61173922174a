"""Simulated GPU memory behaves like a GPU's (issue 28, item 3): a capacity that is enforced with CUDA's
OutOfMemoryError, the caching allocator's rounding in memory_allocated/reserved, and a default that the
host can hold (simgpu/cuda_sim/memory.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from simgpu.cuda_sim import memory
from tests.processes import child_env

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def test_blocks_and_segments_follow_the_caching_allocator() -> None:
    gpu = memory.DeviceMemory(0, 80 << 30)
    assert gpu.allocate(0) is None and gpu.total_reserved() == 0   # CUDA allocates nothing for 0 bytes
    assert gpu.allocate(1).size == 512 and gpu.total_reserved() == 2 * MIB  # a small block of a 2 MiB segment
    assert gpu.allocate(4000).size == 4096 and gpu.total_reserved() == 2 * MIB  # the same segment
    five = gpu.allocate(5 * MIB)                      # under 10 MiB: a 20 MiB large segment
    assert five.size == 5 * MIB and gpu.total_reserved() == 22 * MIB
    big = gpu.allocate(11 * MIB + 1)                  # fits in that segment's free 15 MiB
    assert big.size == 11 * MIB + 512 and gpu.total_reserved() == 22 * MIB
    other = gpu.allocate(11 * MIB)                    # 10 MiB or more: its own segment, rounded to 2 MiB,
    assert other.size == 12 * MIB and gpu.total_reserved() == 34 * MIB  # not split: 1 MiB would remain
    ten = gpu.allocate(10 * MIB + 1)                  # split: 2 MiB - 512 bytes remain (as on an H200)
    assert ten.size == 10 * MIB + 512 and gpu.total_reserved() == 46 * MIB
    assert gpu.total_allocated() == 512 + 4096 + five.size + big.size + other.size + ten.size == gpu.peak_allocated
    gpu.free(ten, 10 * MIB + 1)                       # merges with its segment's free rest: 12 MiB whole again
    gpu.free(other, 11 * MIB)
    assert gpu.total_reserved() == 46 * MIB           # cached, not given back
    again = gpu.allocate(11 * MIB)                    # the smallest cached block that fits, lowest address first:
    assert again is other and again.size == 12 * MIB and gpu.total_reserved() == 46 * MIB  # other's, not split
    assert gpu.allocate(3 * MIB).addr == five.addr + five.size + big.size  # the 20 MiB segment's free tail
    gpu.free(again, 11 * MIB)
    gpu.empty_cache()
    assert gpu.total_reserved() == 2 * MIB + 20 * MIB  # segments that are one free block go back (the two
    # 12 MiB ones); the 2 MiB and 20 MiB ones hold blocks in use (as CUDA's release_cached_blocks)


def test_fragmentation_takes_segments_a_byte_count_would_not() -> None:
    """Free bytes split over two segments do not hold a block larger than either part (the H200 took a
    third 2 MiB segment for cuBLASLt's 1 MiB workspace here: tests/test_memory_history.py)."""
    gpu = memory.DeviceMemory(0, 80 << 30)
    first, second = gpu.allocate(MIB), gpu.allocate(MIB)    # two 1 MiB blocks: one 2 MiB segment
    small = [gpu.allocate(300 << 10) for _ in range(4)]      # 1.2 MiB: a second segment, 0.8 MiB left
    gpu.free(first, MIB)                                     # 1 MiB free in segment one, 0.8 MiB in two
    stats = gpu.stats()
    assert gpu.total_reserved() == 4 * MIB and stats["inactive_split.all.current"] == 2
    assert stats["inactive_split_bytes.all.current"] == MIB + 2 * MIB - 4 * (300 << 10)
    assert gpu.allocate(MIB).addr == first.addr              # exactly 1 MiB fits in the freed block
    assert gpu.allocate(MIB).size == MIB and gpu.total_reserved() == 6 * MIB  # 1.8 MiB free in all: a new segment
    for block in small:
        gpu.free(block, 300 << 10)
    gpu.free(second, MIB)


def test_each_stream_caches_its_own_blocks() -> None:
    gpu = memory.DeviceMemory(0, 80 << 30)
    block = gpu.allocate(4096, stream=0)
    gpu.free(block, 4096, stream=0)
    on_seven = gpu.allocate(4096, stream=7)           # the default stream's cached segment is not reused:
    assert on_seven.size == 4096 and gpu.total_reserved() == 4 * MIB  # a second 2 MiB segment, for stream 7
    assert gpu.allocate(4096, stream=0).size == 4096 and gpu.total_reserved() == 4 * MIB
    gpu.free(on_seven, 4096, stream=7)
    gpu.empty_cache()
    assert gpu.total_reserved() == 2 * MIB


def test_an_allocation_past_capacity_raises_cudas_out_of_memory_after_freeing_the_cache() -> None:
    gpu = memory.DeviceMemory(3, 64 * MIB)
    block = gpu.allocate(40 * MIB)
    gpu.free(block, 40 * MIB)                         # 40 MiB cached
    assert gpu.allocate(50 * MIB).size == 50 * MIB    # fits once the cache is given back (a retry)
    assert gpu.retries == 1
    with pytest.raises(torch.cuda.OutOfMemoryError) as info:
        gpu.allocate(20 * MIB)
    assert str(info.value).startswith("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 3 has a total capacity "
                                      "of 64.00 MiB of which 14.00 MiB is free. Including non-PyTorch memory, this "
                                      "process has 50.00 MiB memory in use. Of the allocated memory 50.00 MiB is "
                                      "allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.")
    assert gpu.ooms == 1 and gpu.stats()["num_ooms"] == 1
    gpu.fraction = 0.5
    with pytest.raises(torch.cuda.OutOfMemoryError):  # set_per_process_memory_fraction
        gpu.allocate(1)


def test_the_default_capacity_is_the_hosts_share() -> None:
    host = memory.host_limit_bytes()
    assert memory.default_capacity(1) == min(141 << 30, host)
    assert memory.default_capacity(8) == min(141 << 30, host // 8)


def test_the_host_guard_stops_before_the_host_runs_out(monkeypatch) -> None:
    guard = memory.HostGuard()
    monkeypatch.setattr(memory, "host_available_bytes", lambda: guard.reserve - 1)
    guard.grew(memory.HOST_CHECK_BYTES - 1)  # not looked at yet
    with pytest.raises(memory.HostMemoryExhausted, match="stopping before the kernel's OOM killer does"):
        guard.grew(1)


def test_memory_gb_is_enforced_under_simgpu_run() -> None:
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--gpus", "2", "--memory-gb", "1",
                           str(ROOT / "tests" / "sim_scripts" / "memory_limits.py")], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "OK memory_limits" in done.stdout, done.stdout + done.stderr


def test_memory_history_and_snapshots_read_as_cudas_under_simgpu_run() -> None:
    """_record_memory_history / _snapshot / _dump_snapshot / memory_snapshot (tests/sim_scripts/memory_history.py):
    traces per GPU with the allocating line, segments that add up to the allocator's figures, torch's viewers."""
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--gpus", "2", "--memory-gb", "1",
                           str(ROOT / "tests" / "sim_scripts" / "memory_history.py")], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "OK memory_history" in done.stdout, done.stdout + done.stderr


def test_memory_stats_keep_cudas_counters_per_pool() -> None:
    gpu = memory.DeviceMemory(0, 80 << 30)
    small = gpu.allocate(4000)
    large = gpu.allocate(5 * MIB)
    gpu.free(small, 4000)
    stats = gpu.stats()
    assert stats["allocated_bytes.all.current"] == 5 * MIB and stats["allocated_bytes.all.peak"] == 5 * MIB + 4096
    assert stats["allocated_bytes.small_pool.allocated"] == stats["allocated_bytes.small_pool.freed"] == 4096
    assert stats["allocation.large_pool.current"] == 1 and stats["allocation.all.allocated"] == 2
    assert stats["active_bytes.all.current"] == stats["allocated_bytes.all.current"]
    assert stats["requested_bytes.all.peak"] == 5 * MIB + 4000
    assert stats["segment.all.current"] == 2 and stats["num_device_alloc"] == 2
    assert stats["reserved_bytes.small_pool.current"] == 2 * MIB and stats["reserved_bytes.large_pool.current"] == 20 * MIB
    gpu.empty_cache()                                 # the small pool's segment goes back; the large one is in use
    stats = gpu.stats()
    assert stats["segment.small_pool.current"] == 0 and stats["num_device_free"] == 1
    assert stats["reserved_bytes.all.current"] == 20 * MIB and stats["reserved_bytes.all.peak"] == 22 * MIB
    gpu.reset_peaks()
    assert gpu.stats()["reserved_bytes.all.peak"] == 20 * MIB
    gpu.reset_accumulated()
    assert gpu.stats()["allocation.all.allocated"] == 0 and gpu.stats()["allocation.all.current"] == 1
    gpu.free(large, 5 * MIB)


def test_torch_formats_the_summary_from_the_models_stats(monkeypatch) -> None:
    """torch.cuda.memory_summary reads every metric x pool x field key: a missing one is a KeyError."""
    gpu = memory.DeviceMemory(0, 80 << 30)
    gpu.allocate(3 * MIB)
    monkeypatch.setattr(torch.cuda.memory, "memory_stats", lambda device=None: gpu.stats())
    table = torch.cuda.memory.memory_summary(0)
    assert "| Allocated memory      |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |" in table, table
    assert "| GPU reserved segments |       1    |       1    |       1    |       0    |" in table, table


def test_memory_stats_equal_an_h200s_for_the_recorded_sequence() -> None:
    """benchmarks/public_style/memory_stats_probe.py on an H200 (torch 2.11.0+cu130): a 4000-byte and a 5 MiB
    tensor, the first freed, empty_cache. Every key CUDA reports exists here and equals (the split blocks'
    free tails, inactive_split*, included)."""
    recorded = json.loads((ROOT / "tests/cuda_reference/memory-stats-2.11.0+cu130.json").read_text())
    gpu = memory.DeviceMemory(0, 141 << 30)
    small = gpu.allocate(4000)
    gpu.allocate(5 * MIB)
    gpu.free(small, 4000)
    gpu.empty_cache()
    ours = gpu.stats()
    assert sorted(ours) == recorded["keys"]
    differ = {key: (value, ours[key]) for key, value in recorded["stats"].items()
              if value != ours[key]}
    assert not differ, differ


def test_a_free_from_inside_an_allocation_waits_for_it_instead_of_deadlocking() -> None:
    """The garbage collector can run a storage's finalizer (a free) while this thread is inside allocate:
    the free comes back when the allocation is done. A plain lock taken again hung the OpInfo sweep."""
    import threading

    gpu = memory.DeviceMemory(0, 80 << 30)
    victim = gpu.allocate(4 * MIB)
    new_segment = gpu._new_segment

    def finalizer_runs_meanwhile(*args: object) -> memory.Block:
        gpu.free(victim, 4 * MIB)               # as a __del__ would, from inside the allocation
        assert victim.allocated                 # not yet: the allocation in progress comes first
        return new_segment(*args)

    gpu._new_segment = finalizer_runs_meanwhile
    done: list = []
    worker = threading.Thread(target=lambda: done.append(gpu.allocate(30 * MIB)), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "allocate never returned: the free from inside it deadlocked"
    assert not victim.allocated and gpu.total_allocated() == 30 * MIB
    assert gpu.stats()["allocation.all.current"] == 1


def test_a_free_from_inside_empty_cache_waits_for_it_instead_of_deadlocking() -> None:
    """The same for empty_cache: a finalizer run while it gives segments back (it used to clear its holder
    mark before doing so, so such a free took the lock again and hung)."""
    import threading

    gpu = memory.DeviceMemory(0, 80 << 30)
    victim = gpu.allocate(4 * MIB)
    cached = gpu.allocate(30 * MIB)
    gpu.free(cached, 30 * MIB)
    release = gpu._release_cached

    def finalizer_runs_meanwhile() -> None:
        gpu.free(victim, 4 * MIB)
        assert victim.allocated
        release()

    gpu._release_cached = finalizer_runs_meanwhile
    done: list = []
    worker = threading.Thread(target=lambda: done.append(gpu.empty_cache()), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "empty_cache never returned: the free from inside it deadlocked"
    assert not victim.allocated and gpu.total_allocated() == 0

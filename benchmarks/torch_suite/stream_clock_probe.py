"""Collectives against stream clocks (docs/stream-clocks.md): the same program on real GPUs and simulated.

    torchrun --standalone --nproc-per-node 2 benchmarks/torch_suite/stream_clock_probe.py            # GPUs
    simgpu run --gpus 2 torchrun --standalone --nproc-per-node 2 benchmarks/torch_suite/stream_clock_probe.py

Each rank prints one JSON line: per case, the event time (ms) across a 100 ms `torch.cuda._sleep` and a
collective. On CUDA every case is at least 100 ms. Under simulation `sync_on_side` is the sleep as
get_cycles_per_ms calibrated it (5-11% short on a loaded host), and so is `work_wait` since r31's hook in
backend.SimWork (work.wait() makes the current stream wait for the collective; before it: 3.5 / 8.0 ms);
on rank 0, `peer_sleeps` is a few ms (peers' clocks are not exchanged). On the 2-core host, 2026-11-27:
rank 0 94.6 / 94.5 / 7.6, rank 1 94.7 / 94.6 / 96.1.
"""
from __future__ import annotations

import json
from typing import Callable

import torch
import torch.distributed as dist

SLEEP_MS = 100


def cycles() -> int:
    from torch.testing._internal.common_utils import get_cycles_per_ms

    return int(SLEEP_MS * get_cycles_per_ms())


def timed(body: Callable[[torch.cuda.Event], None]) -> float:
    """Event time from a start on the default stream to the end event `body` records."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    torch.cuda.synchronize()
    start.record()
    body(end)
    torch.cuda.synchronize()
    return round(start.elapsed_time(end), 1)


def main() -> None:
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    side = torch.cuda.Stream()
    x = torch.ones(4, device="cuda")
    n = cycles()

    def sync_on_side(end: torch.cuda.Event) -> None:  # an event after the collective, on its stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(n)
            dist.all_reduce(x)
            end.record()

    def work_wait(end: torch.cuda.Event) -> None:  # async collective on a side stream, waited by its work
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(n)
            work = dist.all_reduce(x, async_op=True)
        work.wait()
        end.record()

    def peer_sleeps(end: torch.cuda.Event) -> None:  # only rank 1 sleeps before the collective
        if rank == 1:
            torch.cuda._sleep(n)
        dist.all_reduce(x)
        end.record()

    cases = {"sync_on_side": sync_on_side, "work_wait": work_wait, "peer_sleeps": peer_sleeps}
    print(json.dumps({"rank": rank, "sleep_ms": SLEEP_MS, **{name: timed(body) for name, body in cases.items()}}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Run under `simgpu run --gpus 2`: simulated streams keep their own clocks (simgpu/cuda_sim/stream_clocks.py).
`torch.cuda._sleep` on two streams overlaps as on a GPU (test_fully_shard_overlap.py times FSDP2's streams
this way), stream and event waits order the clocks, the host waits only where it synchronizes, and a program
that never calls `_sleep` times the host exactly as before. Before stream clocks, `_sleep` held the host, so
two 200 ms sleeps on two streams took 400 ms of events and query() was always True."""
import time

import torch

SLEEP_MS = 200.0  # long enough that a host stall between two consecutive calls cannot fake or hide an overlap
CYCLES = int(SLEEP_MS * 1_980_000)


def timed() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


default = torch.cuda.current_stream()
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

# two streams sleeping at once: the default stream waits for both, and the span is one sleep, not two
start, end = timed()
start.record()
for side in (s1, s2):
    side.wait_stream(default)
    with torch.cuda.stream(side):
        torch.cuda._sleep(CYCLES)
assert not s1.query() and not s2.query(), "a stream sleeping on the GPU reported its work done"
default.wait_stream(s1)
default.wait_stream(s2)
end.record()
assert not end.query(), "an event behind two sleeping streams reported complete"
try:
    start.elapsed_time(end)
except RuntimeError as error:
    assert "Both events must be completed" in str(error), error
else:
    raise AssertionError("elapsed_time of an event not yet reached was answered (CUDA refuses it)")
end.synchronize()
assert end.query() and s1.query() and s2.query(), "event.synchronize() returned before the sleeps ended"
overlapped = start.elapsed_time(end)
assert SLEEP_MS <= overlapped < 2 * SLEEP_MS, f"two {SLEEP_MS} ms sleeps on two streams spanned {overlapped} ms"

# a wait orders the clocks: s2 after s1 is two sleeps end to end, by wait_stream and by wait_event
for order in ("wait_stream", "wait_event"):
    start, end = timed()
    start.record()
    s1.wait_stream(default)
    with torch.cuda.stream(s1):
        torch.cuda._sleep(CYCLES)
    if order == "wait_stream":
        s2.wait_stream(s1)
    else:
        s1.record_event().wait(s2)
    with torch.cuda.stream(s2):
        torch.cuda._sleep(CYCLES)
    default.wait_stream(s2)
    end.record()
    torch.cuda.synchronize()
    serial = start.elapsed_time(end)
    assert serial >= 2 * SLEEP_MS, f"{order}: a sleep after another spanned {serial} ms, less than both"

# without a wait, an event on the default stream does not wait for a side stream's sleep
start, end = timed()
start.record()
with torch.cuda.stream(s1):
    torch.cuda._sleep(CYCLES)
end.record()
assert end.query() and not s1.query(), "the default stream took a side stream's sleep it never waited for"
assert start.elapsed_time(end) < SLEEP_MS, start.elapsed_time(end)

# synchronize waits for every stream of its device, and only of its device
torch.cuda.synchronize()
assert s1.query(), "torch.cuda.synchronize() left a stream running"
other = torch.cuda.Stream(device=1)
with torch.cuda.stream(other):
    torch.cuda._sleep(CYCLES)
torch.cuda.synchronize(0)
assert not other.query(), "synchronize(0) waited for a stream of cuda:1"
other.synchronize()
assert other.query(), "Stream.synchronize() returned before its sleep ended"
with torch.cuda.stream(s2):
    torch.cuda._sleep(CYCLES)
assert not s2.query()
torch.cuda.synchronize()
assert s2.query(), "torch.cuda.synchronize() returned before a side stream's sleep ended"

# no _sleep: events time the host, exactly as before stream clocks (every clock is behind the host)
for stream in (default, s1, s2):
    start, end = timed()
    before = time.perf_counter()
    start.record(stream)
    after_start = time.perf_counter()
    x = torch.randn(256, 256, device="cuda")
    for _ in range(5):
        x = x @ x / 256
    time.sleep(0.02)
    before_end = time.perf_counter()
    end.record(stream)
    after = time.perf_counter()
    assert start.query() and end.query() and stream.query()
    elapsed = start.elapsed_time(end) / 1000
    assert before_end - after_start <= elapsed <= after - before, (elapsed, before_end - after_start, after - before)

print("OK stream_clocks")

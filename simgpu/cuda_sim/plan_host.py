"""The host's side of a plan's step time: eager PyTorch issues every op and collective from Python, and
a GPU that runs its queue faster than the host fills it waits for the host (small models, FSDP2's
per-module hooks, DTensor's dispatch, a pipeline schedule's per-microbatch Python).

Measured, not counted: a plan runs the program's own host path (its Python, torch's autograd and
C++ above the dispatch, FSDP2, DTensor, torch.distributed.pipelining) on this machine. What the
simulation itself adds is left out: its sections (`SIM`, `DISPATCH`: an op's placement and meta
kernel, the allocator model, the simulated collectives, its Python kernels for what CUDA does in C++ such
as SDPA's kernel choice and autocast's policies, where `PROGRAM` marks the op they run as the program's)
are not counted, and what it adds outside
them (torch's C++ around Python modes, the function mode's own Python) is taken off per torch call
and per dispatched op at the rate `calibrate` measures in the rank against the launcher's `baseline`
(the same two torch calls without simulation). What is left is the program's own CPU time here;
scaled by a speed probe of plain Python (REFERENCE_PROBE_US on the reference box over this host's,
sampled as the program runs, so that the load of a shared machine moves both alike), it is the
program's host time on the box. plan.Recorder runs a host clock on it: an op starts on the GPU no
earlier than the host has issued it, so a host-bound step shows the GPU idle ("waiting for the
host"), and `.item()` and synchronize move the host to the GPU's clock.

Not modelled: CUDA's own launch cost below the dispatch (a few microseconds an op, LAUNCH_US = 0),
NCCL's launch of a collective, and a host CPU other than the reference box's unless
SIMGPU_PLAN_HOST_PROBE_US names the target's probe. Checked against H200 boxes in docs/plan-mode.md.
"""
from __future__ import annotations

import gc
import json
import math
import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch


def typical_error(ratios: Iterable[float]) -> float:
    """exp(mean |log ratio|) - 1: the geometric-mean relative error, over and under alike."""
    logs = [abs(math.log(r)) for r in ratios]
    if not logs:
        raise ValueError("plan_host.typical_error: no ratios")
    return math.exp(sum(logs) / len(logs)) - 1


# ----------------------------------------------------------------------------- the measured host
# speed_probe_us() on the host CPU of the 4x H200 box (least of 5, two processes: 369, 372 us; 2026-11-27,
# benchmarks/results/plan33-host-h200-2026-11-27); the 2x H200 box's CPU took 442-451 us
REFERENCE_PROBE_US = 370.0
ENV_REFERENCE = "SIMGPU_PLAN_HOST_PROBE_US"  # the target's host speed instead (`python -m simgpu.cuda_sim.plan_host` there)
ENV_HOST = "SIMGPU_PLAN_HOST"  # the launcher's measurements of this host without simulation (JSON; baseline())
LAUNCH_US = 0.0  # host time of a GPU op below the dispatch on CUDA (its launch): not added (docs/plan-mode.md)
COLLECTIVE_LAUNCH_US = 0.0  # host time of a collective's NCCL launch: not added
PROBE_ROUNDS = 600  # about 0.7 ms of Python on the 2-core development machine
PROBE_EVERY_US = 20_000.0  # a plan samples the speed probe after this much program CPU...
PROBE_WINDOW = 15  # ...and scales by the median of the last this many samples

_thread = threading.local()


class _Holder:
    """A plain object with attributes, as frameworks keep their state (the speed probe reads and sets them)."""

    def __init__(self, value: int):
        self.value = value
        self.seen: list[int] = []

    def bump(self, by: int) -> int:
        self.value += by
        return self.value


def _probe_round(i: int, table: dict[int, list[int]], holder: _Holder) -> int:
    table[i % 17] = [j * 2 for j in range(8)]
    holder.seen.append(holder.bump(i & 7))
    if len(holder.seen) > 64:
        holder.seen.clear()
    return sum(table.get(i % 5, ())) + len(str(i)) + (holder.value if isinstance(holder, _Holder) else 0)


def speed_probe_us(repeats: int = 5, rounds: int = PROBE_ROUNDS) -> float:
    """The least CPU time (us, this thread) of a fixed piece of plain Python (calls, attributes, dicts,
    lists, strings: what a framework's own code does between ops). On the reference box it took
    REFERENCE_PROBE_US: the ratio says how much faster the box runs the program's Python than this host
    does at this moment. Pure Python, so the simulation's modes do not touch it; the least of a few
    repeats, so that a burst of other work moves it little. A plan samples it among the program's work
    (plan.Recorder: every PROBE_EVERY_US of program CPU), so that a change of load on a shared machine
    (a busy sibling hyperthread can double a thread's CPU time) moves the program's measured time and
    the probe alike."""
    best = float("inf")
    collecting = gc.isenabled()
    gc.disable()  # a collection over a large process's heap is not the host's speed
    try:
        for _ in range(repeats):
            table: dict[int, list[int]] = {}
            holder = _Holder(0)
            started = time.thread_time()
            for i in range(rounds):
                _probe_round(i, table, holder)
            best = min(best, time.thread_time() - started)
    finally:
        if collecting:
            gc.enable()
    return best * 1e6


class _SimSection:
    """`with SIM:` around the simulation's own work (a plan's op placement, its collectives): the CPU it
    takes there is not the program's, whose own host time (its Python, torch's C++ above the dispatch)
    is what a GPU's host would also spend. Re-entrant and per thread; only the outermost section counts,
    and each outermost one counts as one entry (what torch's dispatch into a Python mode costs outside
    any section is taken off per entry: HostModel)."""

    active = False

    def __init__(self, dispatch: bool):
        self.dispatch = dispatch  # an op torch dispatched to the simulation's mode (counted: HostModel)

    def __enter__(self) -> None:
        if not _SimSection.active:
            return
        st = _thread.__dict__
        depth = st.get("depth", 0)
        if depth == 0:
            now = time.thread_time()
            st["program"] = st.get("program", 0.0) + now - st.get("since", now)
            st["entered"] = now
            st["refund"] = False
            if self.dispatch:
                st["entries"] = st.get("entries", 0) + 1
        st["depth"] = depth + 1

    def __exit__(self, *exc: object) -> None:
        if not _SimSection.active:
            return
        st = _thread.__dict__
        st["depth"] -= 1
        if st["depth"] == 0:
            now = time.thread_time()
            if st["refund"]:  # work the box's CPU does too (an op on host tensors)
                st["program"] += now - st["entered"]
            st["since"] = now

    def refund(self) -> None:
        """The outermost section on this thread (called there, not in an inner one) was the program's own
        host work after all."""
        if _SimSection.active and _thread.__dict__.get("depth", 0) == 1:
            _thread.__dict__["refund"] = True


class _ProgramSection:
    """`with PROGRAM:` inside a simulation section, around what the program's host would do there on a GPU
    too (the op that the simulation's Python kernel for scaled_dot_product_attention or for an autocast
    policy finally runs): counted as the program's again until it ends, ops dispatched there counted
    as entries. Outside any section it changes nothing."""

    def __enter__(self) -> None:
        if not _SimSection.active:
            return
        st = _thread.__dict__
        depth = st.get("depth", 0)
        st.setdefault("paused", []).append(depth)
        if depth:
            now = time.thread_time()
            if st["refund"]:  # the section's time so far was the program's after all
                st["program"] += now - st["entered"]
            st["depth"], st["since"] = 0, now

    def __exit__(self, *exc: object) -> None:
        if not _SimSection.active:
            return
        st = _thread.__dict__
        depth = st["paused"].pop()
        if depth:
            now = time.thread_time()
            st["program"] = st.get("program", 0.0) + now - st["since"]
            st["depth"], st["entered"] = depth, now


SIM = _SimSection(dispatch=False)  # the simulation's collectives, the allocator model's frees, its Python kernels
DISPATCH = _SimSection(dispatch=True)  # an op in the simulation's dispatch mode
PROGRAM = _ProgramSection()  # the program's own work inside a SIM section (the op a Python kernel runs)


def activate() -> None:
    """Measure the program's host from now on (a plan)."""
    _SimSection.active = True


def measuring() -> bool:
    return _SimSection.active


def note_call() -> None:
    """The simulation's function mode saw one torch call (its cost per call is taken off: HostModel)."""
    st = _thread.__dict__
    st["calls"] = st.get("calls", 0) + 1


@dataclass
class Take:
    """What the program's host did since the last take on this thread."""
    program_us: float  # its CPU time outside the simulation's sections
    calls: int  # torch calls the simulation's function mode saw
    entries: int  # outermost simulation sections (ops dispatched, collectives)


def take() -> Take:
    """This thread's program CPU, calls and entries since the last take."""
    if not _SimSection.active:
        return Take(0.0, 0, 0)
    st = _thread.__dict__
    if st.get("depth", 0) == 0:  # outside a section: the program's time runs up to now (and from now)
        now = time.thread_time()
        st["program"] = st.get("program", 0.0) + now - st.get("since", now)
        st["since"] = now
    out = Take(st.get("program", 0.0) * 1e6, st.get("calls", 0), st.get("entries", 0))
    st["program"], st["calls"], st["entries"] = 0.0, 0, 0
    return out


def _probe_work(x: torch.Tensor) -> tuple[Callable[[], object], Callable[[], object]]:
    """A torch call that dispatches nothing (`x.dim()`: one call of a function mode) and one that
    dispatches one op (`x.view(-1)`: one call, one dispatch)."""
    return (lambda: x.dim()), (lambda: x.view(-1))


def _least_us(work: Callable[[], object], rounds: int = 2000, repeats: int = 5) -> float:
    """The least CPU time (us, this thread) per call of `work`, over `repeats` runs of `rounds` calls."""
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        for _ in range(rounds):
            work()
        best = min(best, time.thread_time() - started)
    return best / rounds * 1e6


def _program_us(work: Callable[[], object], rounds: int) -> float:
    """The program CPU (us, outside the simulation's sections) per call of `work`, over `rounds` calls."""
    take()
    for _ in range(rounds):
        work()
    return take().program_us / rounds


def baseline() -> dict[str, float]:
    """This host without simulation (the launcher's process): the speed probe and the two torch calls."""
    call, view = _probe_work(torch.zeros(4, 4))
    return {"probe_us": speed_probe_us(), "call_us": _least_us(call), "view_us": _least_us(view)}


def _baseline_from(raw: str) -> dict[str, float]:
    try:
        base = json.loads(raw)
        return {key: float(base[key]) for key in ("probe_us", "call_us", "view_us")}
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{ENV_HOST}={raw!r}: expected the JSON that plan_host.baseline() writes") from None


@dataclass(frozen=True)
class HostModel:
    """What the simulation adds, outside its sections, per torch call and per entry (torch's C++ around
    Python modes, the function mode's own Python), in units of this host's speed probe, so that one
    probe taken at each step scales them and the program's time to the box alike."""
    per_call: float
    per_entry: float
    reference_probe_us: float  # the predicted host's speed probe (reference_probe_us())

    def box_us(self, t: Take, probe_us: float) -> float:
        """The program's host time on the box for what `t` saw, this host's probe at `probe_us` now."""
        own = t.program_us - (t.calls * self.per_call + t.entries * self.per_entry) * probe_us
        return max(own, 0.0) * self.reference_probe_us / probe_us


def reference_probe_us() -> float:
    """The speed probe of the host a plan predicts: SIMGPU_PLAN_HOST_PROBE_US, or the reference box's."""
    raw = os.environ.get(ENV_REFERENCE)
    if not raw:
        return REFERENCE_PROBE_US
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{ENV_REFERENCE}={raw!r}: expected the positive number `python -m simgpu.cuda_sim.plan_host` "
                         f"prints on the target's host")
    return value


def uncalibrated() -> HostModel:
    """Before calibrate(): nothing taken off."""
    return HostModel(0.0, 0.0, reference_probe_us())


def calibrate(x: torch.Tensor) -> HostModel:
    """This process's host model, `x` a storage-less GPU tensor and the simulation's modes on: the
    launcher's two torch calls again, their excess over the launcher's figures per call and per entry.
    Without the launcher's figures (SIMGPU_PLAN_HOST unset: a process not started by `simgpu run
    --plan`) nothing is taken off: the simulation's excess counts as the program's (an overestimate)."""
    raw = os.environ.get(ENV_HOST)
    if not raw:
        return uncalibrated()
    base = _baseline_from(raw)
    call, view = _probe_work(x)
    calls, views = [], []
    for _ in range(7):  # each in units of a probe taken beside it: the load may change meanwhile
        probe = speed_probe_us(repeats=1)
        calls.append(_program_us(call, 500) / probe)
        views.append(_program_us(view, 500) / probe)
    take()
    per_call = max(statistics.median(calls) - base["call_us"] / base["probe_us"], 0.0)
    per_entry = max(statistics.median(views) - base["view_us"] / base["probe_us"] - per_call, 0.0)
    return HostModel(per_call, per_entry, reference_probe_us())


if __name__ == "__main__":  # the number SIMGPU_PLAN_HOST_PROBE_US takes: run it on the target's host
    print(f"{speed_probe_us():.1f}")

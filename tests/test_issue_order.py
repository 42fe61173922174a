"""simgpu.issue_order on its own: a group's issuer thread starts collectives in order, and the program's
future callbacks never run on it (a callback that issues a collective and waits for it, as PowerSGD's
DDP hook does, would wait for itself)."""
from __future__ import annotations

import threading

import torch

from simgpu.issue_order import Issuer


class DoneWork:
    """A started operation that has already finished (a small gloo op can end before its start returns)."""

    def __init__(self, value: list[torch.Tensor]):
        self._future: torch.futures.Future = torch.futures.Future()
        self._future.set_result(value)

    def get_future(self) -> torch.futures.Future:
        return self._future

    def wait(self, timeout=None) -> bool:  # noqa: ANN001
        return True

    def is_completed(self) -> bool:
        return True


def test_a_future_callback_may_issue_on_the_same_group_and_wait():
    peers_posted = threading.Event()  # the strict check of the first call waits for the other ranks
    issuer = Issuer(settle=lambda ticket: peers_posted.wait(60) if ticket == "first" else None, name="issuer-test")
    threads_seen: list[str] = []

    def callback(fut: torch.futures.Future) -> float:
        threads_seen.append(threading.current_thread().name)
        second = issuer.submit("second", lambda: DoneWork([fut.value()[0] * 2]))
        return second.get_future().wait()[0].item()

    first = issuer.submit("first", lambda: DoneWork([torch.tensor(3.0)]))
    chained = first.get_future().then(callback)  # asked for before the check has passed
    peers_posted.set()
    finished = threading.Event()
    result: list[float] = []
    waiter = threading.Thread(target=lambda: (result.append(chained.wait()), finished.set()), daemon=True)
    waiter.start()
    assert finished.wait(30), f"the callback waited for its own issuer (it ran on {threads_seen})"
    assert result == [6.0]
    assert threads_seen and threads_seen[0] != "issuer-test"
    issuer.stop(wait=5)


def test_after_start_runs_once_a_checked_call_has_started():
    """after_start (the strict check's deletes) runs after the start, with the ticket; not for an unchecked
    call, nor for one whose check failed."""
    events: list[str] = []

    def settle(ticket):  # noqa: ANN001, ANN202
        if ticket == "bad":
            raise ValueError("mismatch")

    issuer = Issuer(settle=settle, name="issuer-after", after_start=lambda ticket: events.append(f"after {ticket}"))

    def start(name: str):  # noqa: ANN202
        def run() -> DoneWork:
            events.append(f"start {name}")
            return DoneWork([torch.tensor(0.0)])
        return run

    issuer.submit("one", start("one")).wait()
    issuer.submit(None, start("unchecked")).wait()
    bad = issuer.submit("bad", start("bad"))
    issuer.submit("two", start("two")).wait()
    issuer.stop(wait=5)
    try:
        bad.wait()
    except ValueError:
        pass
    else:
        raise AssertionError("the failed check's error did not reach wait()")
    assert events == ["start one", "after one", "start unchecked", "start two", "after two"], events

"""barrier, tested for its meaning: no member leaves before every member has arrived.

Each member sleeps a drawn delay, notes CLOCK_MONOTONIC (shared by all processes on the host) when it
enters and when it leaves; the latest entry must not come after the earliest exit.
"""
from __future__ import annotations

import time
from typing import Any

from hypothesis import strategies as st

from conformance.collectives.common import draw_frame, members_only
from conformance.oracle import OK, Verdict
from conformance.spec import Case, CollectiveSpec, register


def cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell, offset=False)
    case.params["delays"] = draw(st.lists(st.sampled_from([0.0, 0.0, 0.005, 0.02, 0.05]),
                                          min_size=case.size, max_size=case.size), label="delays")
    return case


@members_only
def run(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    time.sleep(case.params["delays"][me])
    entered = time.monotonic()
    work = dist.barrier(group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"entered": entered, "left": time.monotonic(), "waited": waited}


def check(case: Case, outputs: list[dict], flavor: str) -> list[Verdict]:
    last_in = max(o["entered"] for o in outputs)
    verdicts = []
    for me, out in enumerate(outputs):
        if out["left"] < last_in:
            late = max(range(len(outputs)), key=lambda j: outputs[j]["entered"])
            verdicts.append(Verdict(False, f"left the barrier {1e3 * (last_in - out['left']):.2f} ms before "
                                           f"member {late} arrived"))
        elif case.async_op and out["waited"] is not True:
            verdicts.append(Verdict(False, f"Work.wait() returned {out['waited']!r}"))
        else:
            verdicts.append(OK)
    return verdicts


register(CollectiveSpec(name="barrier", family="control", cases=cases, run=run, check=check,
                        expect=lambda profile, case: None, doc=__doc__))

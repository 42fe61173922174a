"""barrier, tested for its meaning: no member leaves before every member has arrived.

Each member sleeps a drawn delay, notes CLOCK_MONOTONIC (shared by all processes on the host) when it
enters and when it leaves; the latest entry must not come after the earliest exit. A case is a list of
rounds, one barrier each: the main property draws one round of delays; the latecomer condition runs one
round per member, in which that member alone arrives late (LATE), so a barrier that does not wait for
some member (its rank 0, say) fails in every profile, not by chance.
"""
from __future__ import annotations

import time
from typing import Any

from hypothesis import strategies as st

from conformance.collectives.common import draw_frame, members_only
from conformance.oracle import OK, Verdict
from conformance.spec import Case, CollectiveSpec, register


LATE = 0.5  # seconds the latecomer of a round waits before entering: more than a loaded host's scheduling skew
# between the members' processes (at 50 ms, a busy 2-core CI machine let another member enter last, and a
# barrier that skips member 0 went uncaught)


def cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell, offset=False)
    if cell.condition == "latecomer":
        case.params["rounds"] = [[LATE if j == late else 0.0 for j in range(case.size)] for late in range(case.size)]
        return case
    case.params["rounds"] = [draw(st.lists(st.sampled_from([0.0, 0.0, 0.005, 0.02, 0.05]),
                                           min_size=case.size, max_size=case.size), label="delays")]
    return case


@members_only
def run(ctx: Any, case: Case, group: Any, me: int) -> list[dict]:
    import torch.distributed as dist

    rounds = []
    for delays in case.params["rounds"]:
        time.sleep(delays[me])
        entered = time.monotonic()
        work = dist.barrier(group=group, async_op=case.async_op)
        waited = work.wait() if case.async_op else None
        rounds.append({"entered": entered, "left": time.monotonic(), "waited": waited})
    return rounds


def check(case: Case, outputs: list[list[dict]], flavor: str) -> list[Verdict]:
    verdicts = [OK] * len(outputs)
    for k in range(len(case.params["rounds"])):
        in_round = [out[k] for out in outputs]
        last_in = max(o["entered"] for o in in_round)
        late = max(range(len(in_round)), key=lambda j: in_round[j]["entered"])
        where = f" (round {k + 1} of {len(case.params['rounds'])})" if len(case.params["rounds"]) > 1 else ""
        for me, out in enumerate(in_round):
            if not verdicts[me].ok:
                continue
            if out["left"] < last_in:
                verdicts[me] = Verdict(False, f"left the barrier {1e3 * (last_in - out['left']):.2f} ms before "
                                              f"member {late} arrived{where}")
            elif case.async_op and out["waited"] is not True:
                verdicts[me] = Verdict(False, f"Work.wait() returned {out['waited']!r}{where}")
    return verdicts


register(CollectiveSpec(name="barrier", family="control", cases=cases, run=run, check=check,
                        expect=lambda profile, case: None, doc=__doc__, conditions=("latecomer",)))

"""Object collectives (pickled Python objects): broadcast_object_list, all_gather_object,
gather_object, scatter_object_list. They fill the caller's lists in place.

gather_object's slot j is member j's object whatever the order the members' data reaches the root: the
arrival condition delays each member's inner gather (torch's gather_object all-gathers the sizes first,
which lines the members up again, then gathers): the root first, the others in a drawn order other than
theirs (common.draw_arrival).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from hypothesis import strategies as st

from conformance.collectives.common import draw_frame, draw_arrival, members_only
from conformance.oracle import OK, Verdict
from conformance.spec import Case, CollectiveSpec, register

_leaves = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
           | st.binary(max_size=64))
objects = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)


def cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell, root=True, offset=False)
    case.async_op = False
    count = draw(st.integers(1, 3), label="objects per list")
    case.params["objects"] = [draw(st.lists(objects, min_size=count, max_size=count)) for _ in range(case.size)]
    if cell.condition == "arrival":
        draw_arrival(draw, case)
        case.params["objects"] = [[j, *objs] for j, objs in enumerate(case.params["objects"])]  # all distinct
    return case


@contextlib.contextmanager
def _inner_gather_after(delay: float) -> Iterator[None]:
    """torch's gather_object calls distributed_c10d.gather after its size all_gather: wait `delay` before
    that inner gather, so that the members reach it in the drawn order (the arrival condition)."""
    import time

    from torch.distributed import distributed_c10d as c10d

    if not delay:
        yield
        return
    original = c10d.gather

    def late_gather(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay)
        return original(*args, **kwargs)

    c10d.gather = late_gather
    try:
        yield
    finally:
        c10d.gather = original


def _run(kind: str) -> Any:
    @members_only
    def run(ctx: Any, case: Case, group: Any, me: int) -> Any:
        import torch.distributed as dist

        mine, root = case.params["objects"][me], case.members[case.root]
        if kind == "broadcast_object_list":
            lst = list(mine)
            dist.broadcast_object_list(lst, src=root, group=group)
            return lst
        if kind == "all_gather_object":
            lst = [None] * case.size
            dist.all_gather_object(lst, mine, group=group)
            return lst
        if kind == "gather_object":
            lst = [None] * case.size if me == case.root else None
            with _inner_gather_after(case.params.get("arrival", [0.0] * case.size)[me]):
                dist.gather_object(mine, lst, dst=root, group=group)
            return lst
        out: list[Any] = [None]
        dist.scatter_object_list(out, case.params["objects"] if me == case.root else None, src=root, group=group)
        return out[0]

    run.__name__ = run.__qualname__ = f"run_{kind}"
    return run


run_broadcast_object_list = _run("broadcast_object_list")
run_all_gather_object = _run("all_gather_object")
run_gather_object = _run("gather_object")
run_scatter_object_list = _run("scatter_object_list")


def _expected(kind: str, case: Case, me: int) -> Any:
    objs = case.params["objects"]
    return {"broadcast_object_list": objs[case.root], "all_gather_object": objs,
            "gather_object": objs if me == case.root else None, "scatter_object_list": objs[me]}[kind]


def _check(kind: str) -> Any:
    def check(case: Case, outputs: list[Any], flavor: str) -> list[Verdict]:
        verdicts = []
        for me, got in enumerate(outputs):
            want = _expected(kind, case, me)
            verdicts.append(OK if got == want else Verdict(False, f"got {got!r:.200}, expected {want!r:.200}"))
        return verdicts

    return check


for _kind, _run_fn in (("broadcast_object_list", run_broadcast_object_list),
                       ("all_gather_object", run_all_gather_object),
                       ("gather_object", run_gather_object),
                       ("scatter_object_list", run_scatter_object_list)):
    register(CollectiveSpec(name=_kind, family="control", cases=cases, run=_run_fn, check=_check(_kind),
                            expect=lambda profile, case: None, doc=__doc__,
                            conditions=("arrival",) if _kind == "gather_object" else ()))

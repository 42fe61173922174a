"""Object collectives (pickled Python objects): broadcast_object_list, all_gather_object,
gather_object, scatter_object_list. They fill the caller's lists in place."""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.collectives.common import draw_frame, members_only
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
    return case


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
                            expect=lambda profile, case: None, doc=__doc__))

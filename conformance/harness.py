"""The one property-test harness of the suite's three families (collectives, single-process APIs,
training properties): hypothesis settings per backend and effort, a database key per cell, the
reproduce line, and known findings reported as xfail.

Each cell's property is a function nested in its pytest test; hypothesis would key every one of them
alike (same source), so a failure saved for one cell would be replayed in every other. run_property
gives each cell its own key.
"""
from __future__ import annotations

from typing import Callable, Iterable

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from conformance.findings import Finding

# Backends whose examples are cheap enough to shrink: everything else is real hardware, where one failing
# cell shrank through thousands of examples (GPU run 2: a cell blew a 10-minute budget). --shrink turns
# shrinking back on there.
SHRINKING_BACKENDS = ("sim", "gloo")


def hypothesis_settings(backend: str, effort: str, shrink: bool) -> settings:
    """The cell's hypothesis settings: the effort profile, without the shrink phase on real hardware."""
    base = settings.get_profile(f"simgpu-{effort}")
    if shrink or backend in SHRINKING_BACKENDS:
        return base
    return settings(base, phases=tuple(p for p in base.phases if p != Phase.shrink))


def database_key(backend: str, cell_id: str) -> bytes:
    """What tells one cell's saved examples from another's (the backend too: an NCCL failure is not sim's)."""
    return f"{backend}/{cell_id}".encode()


def run_property(body: Callable[[st.DataObject], None], *, backend: str, cell_id: str, effort: str,
                 shrink: bool, examples: int | None = None) -> None:
    """Run body(data) as this cell's hypothesis property, under its settings and its own database key;
    examples: how many to draw, where not the effort profile's (a pinned input class's property)."""
    chosen = hypothesis_settings(backend, effort, shrink)
    if examples is not None:
        chosen = settings(chosen, max_examples=examples)

    @chosen
    @given(data=st.data())
    def property_holds(data: st.DataObject) -> None:
        body(data)

    # the extra digest hypothesis's own pytest plugin sets for parametrized tests (hypothesis.internal.reflection)
    property_holds.hypothesis.inner_test._hypothesis_internal_add_digest = database_key(backend, cell_id)
    property_holds()


def reproduce_line(backend: str, backend_module: str | None, selector: str, effort: str,
                   claimed: str | None = None) -> str:
    """The command that reruns one cell, for every failure message (claimed: --backend-profile)."""
    module = f" --backend-module={backend_module}" if backend_module else ""
    module += f" --backend-profile={claimed}" if claimed else ""
    return (f"pytest conformance --backend={backend}{module} -k '{selector}' --conformance-profile={effort}"
            " (hypothesis prints the seed / @reproduce_failure below)")


def xfail_known(found: Iterable[Finding], inherited_from: str | None = None) -> None:
    """A cell whose failures were all registered findings is an expected failure, naming them;
    inherited_from: the base backend whose findings they are (a registered backend that claims its table)."""
    found = list(found)
    whose = f" of {inherited_from} (the claimed base)" if inherited_from else ""
    if found:
        pytest.xfail("; ".join(f"known finding {f.id}{whose}: {f.summary}" for f in found))

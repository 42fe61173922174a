"""Hypothesis shrinks on the simulator and gloo only, unless --shrink (README, 'Choosing what runs')."""
from __future__ import annotations

from hypothesis import Phase

from conformance.plugin import _register_hypothesis_profiles
from conformance.harness import hypothesis_settings


def test_no_shrinking_on_real_hardware_unless_asked():
    _register_hypothesis_profiles()
    assert Phase.shrink in hypothesis_settings("sim", "ci", False).phases
    assert Phase.shrink in hypothesis_settings("gloo", "ci", False).phases
    nccl = hypothesis_settings("nccl", "ci", False)
    assert Phase.shrink not in nccl.phases and Phase.generate in nccl.phases
    assert nccl.max_examples == hypothesis_settings("sim", "ci", False).max_examples
    assert Phase.shrink in hypothesis_settings("nccl", "ci", True).phases
    assert Phase.shrink not in hypothesis_settings("my_backend", "dev", False).phases


def test_each_cell_has_its_own_hypothesis_database_key() -> None:
    """A failure saved for one cell must not be replayed in another (the properties are nested functions)."""
    import pytest
    from hypothesis import settings
    from hypothesis import strategies as st
    from hypothesis.database import InMemoryExampleDatabase

    from conformance.harness import run_property

    saved = InMemoryExampleDatabase()
    settings.register_profile("simgpu-keytest", database=saved, max_examples=20, deadline=None)

    def body(data: st.DataObject) -> None:
        assert data.draw(st.integers()) < 5  # fails, so hypothesis saves the example under the cell's key

    keys = []
    for cell in ("all_reduce-float32-sum", "broadcast-int8"):
        before = set(saved.data)
        with pytest.raises(AssertionError):
            run_property(body, backend="sim", cell_id=cell, effort="keytest", shrink=False)
        keys.append(set(saved.data) - before)
    assert keys[0] and keys[1], "no failure was saved"
    assert not keys[0] & keys[1]

"""Hypothesis shrinks on the simulator and gloo only, unless --shrink (README, 'Choosing what runs')."""
from __future__ import annotations

from hypothesis import Phase

from conformance.plugin import _register_hypothesis_profiles
from conformance.test_collectives import hypothesis_settings


def test_no_shrinking_on_real_hardware_unless_asked():
    _register_hypothesis_profiles()
    assert Phase.shrink in hypothesis_settings("sim", "ci", False).phases
    assert Phase.shrink in hypothesis_settings("gloo", "ci", False).phases
    nccl = hypothesis_settings("nccl", "ci", False)
    assert Phase.shrink not in nccl.phases and Phase.generate in nccl.phases
    assert nccl.max_examples == hypothesis_settings("sim", "ci", False).max_examples
    assert Phase.shrink in hypothesis_settings("nccl", "ci", True).phases
    assert Phase.shrink not in hypothesis_settings("my_backend", "dev", False).phases

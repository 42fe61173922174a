"""A rank that never arrives, and malformed settings: the report says who waits where and where the
missing rank is, and a bad setting is named, never a hang or a traceback from deep inside torch."""
from __future__ import annotations

import pytest

from simgpu.pool import Binding, RankPool, RankPoolError
from tests import rank_fns


def test_missing_rank_is_reported_with_its_stack():
    with RankPool(2, Binding("sim", env=(("SIMGPU_STRICT_TIMEOUT", "1.5"),)), timeout=30,
                  straggler_grace=2.0) as pool:
        with pytest.raises(RankPoolError) as info:
            pool.run(rank_fns.all_reduce_unless_busy, 1, 60.0)
    err = info.value
    # rank 0 gave up first (strict deadline) because rank 1 never came: rank 1 is the cause (issue 19)
    assert err.kind == "timeout" and err.cause_ranks == [1] and err.collateral_ranks == [0], str(err)
    text = str(err)
    assert "CollectiveTimeout" in text and "rank(s) [1] did not arrive" in text
    assert "busy_elsewhere" in err.stacks[1]  # where the missing rank is


def test_malformed_strict_timeout_is_named_once_before_any_rank_starts():
    with pytest.raises(ValueError, match="SIMGPU_STRICT_TIMEOUT must be a number of seconds, got 'soon'"):
        RankPool(2, Binding("sim", env=(("SIMGPU_STRICT_TIMEOUT", "soon"),)), timeout=30)

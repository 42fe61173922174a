"""Parameters of the two test tiers (tests/conftest.py): the first runs by default, the rest with --full."""
from __future__ import annotations

from typing import Any, Sequence

import pytest


def first_then_full(values: Sequence[Any], ids: Sequence[str]) -> list[Any]:
    """pytest.param for each value; all but the first are marked full."""
    return [pytest.param(v, id=i, marks=() if k == 0 else pytest.mark.full)
            for k, (v, i) in enumerate(zip(values, ids))]

"""The strict simulator checks point-to-point messages as it checks collectives (simgpu/p2p_check.py,
issue 19): a send and the recv it is delivered to must agree on element count and dtype, or both ranks
raise P2PMismatch with a table of the two calls."""
from __future__ import annotations

from pathlib import Path

import pytest

from simgpu.pool import Binding, RankPool
from tests import rank_fns

P2P_MISMATCH = "simgpu.p2p_check.P2PMismatch"
RANK_FNS = Path(rank_fns.__file__)


def _line(marker: str) -> int:
    return next(i + 1 for i, ln in enumerate(RANK_FNS.read_text().splitlines()) if ln.rstrip().endswith(f"# {marker}"))


@pytest.fixture(scope="module")
def pool():
    p = RankPool(2, Binding("sim"), timeout=60.0, straggler_grace=5.0)
    yield p
    p.close(force=True)


def test_matching_messages_pass_and_their_records_are_removed(pool: RankPool) -> None:
    assert [o.value for o in pool.run(rank_fns.p2p_pair, (4, "float32"), (4, "float32"))] == [[0.0, 1.0, 2.0, 3.0]] * 2
    assert [o.value for o in pool.run(rank_fns.p2p_pair, (4, "int64"), (4, "int64"), False)] == [[0, 1, 2, 3]] * 2


def test_isend_does_not_wait_for_the_peers_irecv(pool: RankPool) -> None:
    outcomes = pool.run(rank_fns.p2p_exchange, 5)
    assert [o.value for o in outcomes] == [[10.0, 11.0, 12.0, 13.0, 14.0], [0.0, 1.0, 2.0, 3.0, 4.0]]


@pytest.mark.parametrize("send, recv, blocking", [
    ((4, "float32"), (6, "float32"), True),   # partial data on NCCL
    ((4, "float32"), (4, "float64"), True),   # another dtype
    ((4, "float64"), (8, "float32"), False),  # the same bytes, reinterpreted
])
def test_a_mismatched_pair_fails_both_ranks_with_a_table(pool: RankPool, send: tuple, recv: tuple,
                                                         blocking: bool) -> None:
    outcomes = pool.run(rank_fns.p2p_pair, send, recv, blocking)
    for o in outcomes:
        assert not o.ok and o.error_type == P2P_MISMATCH, o.describe()
        assert (f"rank 0 sends {send[0]} element(s) of {send[1]} to rank 1, which receives {recv[0]} element(s) of "
                f"{recv[1]}") in o.error
        assert f"send({send[1]}[{send[0]}], dst=1, tag=0)" in o.error
        assert f"recv({recv[1]}[{recv[0]}], src=0, tag=0)" in o.error
        if blocking:
            assert f"rank_fns.py:{_line('send-site')}" in o.error and \
                f"rank_fns.py:{_line('recv-site')}" in o.error, o.error
    assert not pool.alive  # the pair's stream may be out of step: fresh ranks next
    assert pool.run(rank_fns.p2p_pair, (2, "float32"), (2, "float32"))[1].value == [0.0, 1.0]


@pytest.mark.parametrize("blocking", [True, False])
def test_a_recv_smaller_than_the_message_raises_not_aborts(pool: RankPool, blocking: bool) -> None:
    """gloo aborts a receiver whose buffer is smaller than the message (SIGABRT in C++); the sender sends
    what the recv expects instead, and both ranks raise P2PMismatch (issue 28, item 10)."""
    outcomes = pool.run(rank_fns.p2p_pair, (6, "float32"), (4, "float32"), blocking)
    for o in outcomes:
        assert not o.ok and o.error_type == P2P_MISMATCH, o.describe()
        assert "rank 0 sends 6 element(s) of float32 to rank 1, which receives 4 element(s) of float32" in o.error
    assert pool.run(rank_fns.p2p_pair, (2, "float32"), (2, "float32"))[1].value == [0.0, 1.0]

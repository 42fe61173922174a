"""The strict check at scale (issue 29 item 4): from SIMGPU_STRICT_LEADER_FROM ranks (default 9) the
group's rank 0 compares the descriptors and posts a verdict, so a collective costs the group O(N)
store reads, not O(N^2); the errors every rank sees are those of the small-group path.

In-process tests drive N StrictCheckers over one store from N threads (one per rank) and count what
each reads; pool tests run the sim backend's strict scenarios of test_sim_backend.py on real ranks
with the leader forced at 2 and 3 ranks, and at 10 ranks with the default threshold."""
from __future__ import annotations

import threading

import pytest
import torch.distributed as dist

from simgpu import strict
from simgpu.pool import Binding, RankPool
from tests.test_sim_backend import STRICT_MISMATCH, STRICT_TIMEOUT, _line_of, errors, rank_call, values


class CountingStore:
    """A HashStore that counts, per reading thread, how many keys it was asked to read."""

    def __init__(self) -> None:
        self.inner = dist.HashStore()
        self.reads: dict[str, int] = {}
        self._lock = threading.Lock()

    def _count(self, n: int) -> None:
        with self._lock:
            name = threading.current_thread().name
            self.reads[name] = self.reads.get(name, 0) + n

    def multi_get(self, keys):
        self._count(len(keys))
        return self.inner.multi_get(keys)

    def get(self, key):
        self._count(1)
        return self.inner.get(key)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _call(numel: int = 4) -> strict.Call:
    return strict.Call("all_reduce", f"all_reduce(float32[{numel}], SUM)", site="here.py:1",
                       agree={"numel": numel, "dtype": "float32", "op": "SUM"})


def _run_group(size: int, calls: dict[int, strict.Call | None], store=None, timeout: float = 20.0):
    """Each rank posts calls[rank] (None: never arrives) and settles it on its own thread; rank -> result
    (the descriptors, None, or the exception raised)."""
    store = store if store is not None else dist.HashStore()
    checkers = [strict.StrictChecker(store, r, size, default_timeout=timeout) for r in range(size)]
    results: dict[int, object] = {}

    def rank(r: int) -> None:
        try:
            ticket = checkers[r].post(calls[r])
            results[r] = checkers[r].settle(ticket)
        except Exception as exc:  # noqa: BLE001 - what each rank raised is the result
            results[r] = exc

    threads = [threading.Thread(target=rank, args=(r,), name=f"rank{r}") for r in range(size) if calls[r] is not None]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 30)
    return results


@pytest.mark.parametrize("leader_from,expected", [(None, lambda n: 2 * n - 1), ("64", lambda n: n * n)])
def test_a_large_group_reads_each_descriptor_once_not_once_per_rank(monkeypatch: pytest.MonkeyPatch,
                                                                    leader_from: str | None, expected) -> None:
    """16 ranks: the leader reads 16 descriptors, the others one verdict each (31 reads); the
    small-group path (forced here with SIMGPU_STRICT_LEADER_FROM=64) reads 16 x 16."""
    if leader_from is None:
        monkeypatch.delenv(strict.LEADER_FROM_ENV, raising=False)
    else:
        monkeypatch.setenv(strict.LEADER_FROM_ENV, leader_from)
    store = CountingStore()
    results = _run_group(16, {r: _call() for r in range(16)}, store=store)
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    assert sum(store.reads.values()) == expected(16), store.reads
    if leader_from is None:
        assert store.reads["rank0"] == 16 and all(store.reads[f"rank{r}"] == 1 for r in range(1, 16))


def test_the_leaders_mismatch_table_reaches_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(strict.LEADER_FROM_ENV, raising=False)
    calls = {r: _call(4) for r in range(9)}
    calls[5] = _call(6)
    results = _run_group(9, calls)
    messages = {str(results[r]) for r in range(9)}
    assert all(isinstance(results[r], strict.CollectiveMismatch) for r in range(9)), results
    assert len(messages) == 1, messages  # one table, rendered by the leader, raised everywhere
    (message,) = messages
    assert "'numel' differs" in message and "rank 5: 6" in message and "float32[6]" in message, message


@pytest.mark.parametrize("missing", [0, 4])
def test_a_missing_rank_is_named_by_every_rank_that_waited(monkeypatch: pytest.MonkeyPatch, missing: int) -> None:
    """The leader itself missing (no verdict ever comes) or another rank (the leader's timeout verdict)."""
    monkeypatch.delenv(strict.LEADER_FROM_ENV, raising=False)
    calls = {r: (None if r == missing else _call()) for r in range(9)}
    results = _run_group(9, calls, timeout=2.0)
    for r in range(9):
        if r == missing:
            continue
        assert isinstance(results[r], strict.CollectiveTimeout), results[r]
        assert results[r].missing_ranks == [missing]
        assert f"rank(s) [{missing}] did not arrive" in str(results[r])


def test_the_leader_deletes_its_verdicts_as_ranks_delete_their_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run leaves a bounded number of records in the store, verdicts included."""
    monkeypatch.delenv(strict.LEADER_FROM_ENV, raising=False)
    store = dist.HashStore()
    checkers = [strict.StrictChecker(store, r, 9, default_timeout=20) for r in range(9)]

    def rank(r: int) -> None:
        for _ in range(40):
            checkers[r].settle(checkers[r].post(_call()))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    kept = [s for s in range(1, 41) if store.check([f"{strict._KEY_PREFIX}/{s}/verdict"])]
    assert kept and min(kept) > 40 - 2 * strict.MAX_UNSETTLED, kept
    assert store.num_keys() <= 9 * (2 * strict.MAX_UNSETTLED + 1) + 2 * strict.MAX_UNSETTLED + 1, store.num_keys()


# ----------------------------------------------------------------------------- on real ranks
def _leader_pool(size: int):
    pool = RankPool(size, Binding("sim", env=((strict.LEADER_FROM_ENV, "2"),)), timeout=60.0)
    pool.start()
    return pool


def test_sim_backend_mismatches_through_the_leader() -> None:
    """The strict scenarios of test_sim_backend.py with the leader forced at 2 and 3 ranks: same errors."""
    pool = _leader_pool(2)
    try:
        for kind, message in values(pool.run(rank_call, "async_mismatch_raises_at_wait")):
            assert kind == "CollectiveMismatch" and "'numel' differs" in message, message
            assert f"test_sim_backend.py:{_line_of('site-async')}" in message, message
        errors(pool.run(rank_call, "mismatch_splits"), STRICT_MISMATCH,
               r"rank 0 sends 1 element\(s\) to rank 1, which expects 2 element\(s\) from rank 0")
    finally:
        pool.close()
    pool = _leader_pool(3)
    try:
        out = pool.run(rank_call, "one_rank_refuses")
        assert out[1].error_type == "ValueError"
        for o in (out[0], out[2]):
            assert o.error_type == STRICT_MISMATCH
            assert "rank 1 refused its call before communicating: ValueError: Tensors must be contiguous" in o.error
    finally:
        pool.close()


def test_sim_backend_timeout_through_the_leader() -> None:
    with RankPool(2, Binding("sim", env=((strict.LEADER_FROM_ENV, "2"),)), timeout=30.0) as pool:
        first = pool.run(rank_call, "timeout", 1.0)
        assert first[1].ok and first[1].value == "skipped"
        assert not first[0].ok and first[0].error_type == STRICT_TIMEOUT, first[0].describe()
        assert "rank(s) [1] did not arrive, rank(s) [0] did" in first[0].error


def _ten_rank_collectives(ctx) -> list[float]:
    import torch

    t = torch.ones(3)
    dist.all_reduce(t)
    out = torch.empty(ctx.world_size)
    dist.all_to_all_single(out, torch.full((ctx.world_size,), float(ctx.rank)))
    if ctx.rank == 7:
        dist.all_reduce(torch.ones(2))  # site-ten
    else:
        dist.all_reduce(torch.ones(3))
    return [t[0].item(), out.sum().item()]


def test_ten_ranks_check_through_the_leader_by_default() -> None:
    with RankPool(10, Binding("sim"), timeout=60.0) as pool:
        out = pool.run(_ten_rank_collectives)
    assert all(o.error_type == STRICT_MISMATCH for o in out), [o.describe() for o in out]
    assert len({o.error for o in out}) == 1 and "rank 7: 2" in out[0].error, out[0].error
    assert f"test_strict_leader.py:{_line_of_here('site-ten')}" in out[0].error


def _line_of_here(marker: str) -> int:
    from pathlib import Path

    lines = Path(__file__).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(f"# {marker}"))


def test_a_malformed_leader_setting_is_refused_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    from simgpu import settings

    with pytest.raises(ValueError, match="SIMGPU_STRICT_LEADER_FROM must be a whole number of ranks >= 2, got '1'"):
        settings.check_environment({strict.LEADER_FROM_ENV: "1"})


class DeleteRecordingStore:
    """A HashStore that records, for each delete_key, whether it came from StrictChecker.tidy."""

    def __init__(self) -> None:
        self.inner = dist.HashStore()
        self.tidying = threading.local()
        self.deletes: list[bool] = []
        self._lock = threading.Lock()

    def delete_key(self, key):
        with self._lock:
            self.deletes.append(getattr(self.tidying, "on", False))
        return self.inner.delete_key(key)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("size", [2, 9])
def test_checks_delete_after_the_collective_starts_not_before_they_wait(monkeypatch: pytest.MonkeyPatch,
                                                                      size: int) -> None:
    """As the issuer drives them (post, settle, start, tidy): every delete comes from tidy, none from a
    settle (a round trip before it reads the group's descriptors), and the store stays bounded; tidy
    deletes nothing a slower rank still reads (such a rank would wait for it and time out)."""
    monkeypatch.delenv(strict.LEADER_FROM_ENV, raising=False)
    store = DeleteRecordingStore()
    checkers = [strict.StrictChecker(store, r, size, default_timeout=20) for r in range(size)]
    failures: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            for i in range(40):
                ticket = checkers[r].post(_call())
                checkers[r].settle(ticket)
                if (i + r) % 7 == 0:
                    threading.Event().wait(0.01)  # ranks drift apart
                store.tidying.on = True
                checkers[r].tidy(ticket)
                store.tidying.on = False
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    assert store.deletes and all(store.deletes), store.deletes.count(False)
    leader = size >= strict.LEADER_FROM
    assert store.num_keys() <= size * (strict.MAX_UNSETTLED + 1) + (strict.MAX_UNSETTLED + 1) * leader + 2, \
        store.num_keys()


def test_groups_share_one_posting_connection_and_wait_on_their_own() -> None:
    """Two groups' checkers over one TCPStore server: one posting connection for the process, a
    waiting one per group; a check of group A that waits for a late rank does not hold up group B."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", server.port, is_master=False, wait_for_workers=False)
    checkers = {g: [strict.StrictChecker(dist.PrefixStore(f"group{g}", client), r, 2, default_timeout=20)
                    for r in range(2)] for g in "AB"}
    for group in checkers.values():
        for c in group:
            c.connect()
    posting = {id(c._post_store.underlying_store) for group in checkers.values() for c in group}
    waiting = {id(c._channel_client) for group in checkers.values() for c in group}
    assert len(posting) == 1 and len(waiting) == 4, (posting, waiting)
    late = checkers["A"][0].post(_call())  # rank 0 of A waits for rank 1, who posts only after B's check
    results: dict[str, object] = {}
    waiter = threading.Thread(target=lambda: results.setdefault("A0", checkers["A"][0].settle(late)))
    waiter.start()
    both = [threading.Thread(target=lambda r=r: results.setdefault(f"B{r}", checkers["B"][r].check(_call())))
            for r in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join(30)
    assert "B0" in results and "B1" in results and "A0" not in results, results
    checkers["A"][1].check(_call())
    waiter.join(30)
    assert [d["rank"] for d in results["A0"]] == [0, 1]

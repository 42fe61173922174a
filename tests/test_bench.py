"""realgpu-bench: nccl-tests' sizes and definitions, its outputs, and the oracle check of every result.

GPU figures come from the GPU box (benchmarks/results/); here the same code runs on CPU ranks over gloo.
"""
from __future__ import annotations

import json

import pytest

from realgpu.bench import UsageError, main, parse_size, sizes
from realgpu.bench_compare import compare, load_nccl_tests
from realgpu.bench_ops import COLLECTIVES, counts
from realgpu.bench_report import parse_nccl_tests
from simgpu.pool import Binding, RankPool
from tests.rank_fns import bench_corrupted_check, bench_late_rank_time


def test_sizes_scan_like_nccl_tests():
    assert parse_size("8") == 8 and parse_size("64K") == 65536 and parse_size("4G") == 4 << 30
    assert sizes(8, 64, 2, None) == [8, 16, 32, 64]
    assert sizes(1 << 20, 3 << 20, None, 1 << 20) == [1 << 20, 2 << 20, 3 << 20]
    with pytest.raises(UsageError, match="expected bytes"):
        parse_size("12X")
    with pytest.raises(UsageError, match="greater than 1"):
        sizes(8, 64, 1.0, None)


def test_counts_follow_nccl_tests_rounding():
    """Split buffers round the per-rank chunk down to 16 bytes (nccl-tests' GetCollByteCount)."""
    assert counts(COLLECTIVES["all_reduce"], 24, 4, 4) == (6, 6)
    assert counts(COLLECTIVES["all_gather"], 8, 4, 4) == (0, 0)          # nothing to move: skipped
    assert counts(COLLECTIVES["all_gather"], 1000, 4, 4) == (60, 240)    # 62 floats a rank -> 60 (16 B)
    assert counts(COLLECTIVES["all_to_all"], 1024, 8, 2) == (64, 128)
    assert counts(COLLECTIVES["reduce_scatter"], 96, 2, 3) == (16, 48)


def test_gloo_sweep_checks_every_result(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(["--backend", "gloo", "-g", "2", "-b", "64", "-e", "4K", "-f", "8", "-n", "2", "-w", "1",
               "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["environment"]["backend"] == "gloo" and doc["environment"]["torch"]
    done = {(r["collective"], r["placement"]) for r in doc["results"]}
    for name, col in COLLECTIVES.items():
        for placement in col.placements:
            assert (name, placement) in done, (name, placement)
    for row in doc["results"]:
        assert row["ok"] and row["checked"], row
        assert row["time_us"] == sorted(row["time_us_ranks"])[len(row["time_us_ranks"]) // 2] or len(
            row["time_us_ranks"]) % 2 == 0
        factor = {"all_reduce": 1.0, "broadcast": 1.0, "reduce": 1.0, "sendrecv": 1.0}.get(row["collective"], 0.5)
        assert row["busbw"] == pytest.approx(row["algbw"] * factor)
        assert row["algbw"] == pytest.approx(row["size"] / (row["time_us"] * 1e-6) / 1e9)
    printed = capsys.readouterr().out
    # the table is nccl-tests' layout: nccl-tests' own parser reads it back, figures included
    parsed = parse_nccl_tests(printed)
    first = next(r for r in doc["results"] if r["collective"] == "all_gather" and r["placement"] == "out")
    again = next(r for r in parsed if r["size"] == first["size"] and r["placement"] == "out")
    assert again["time_us"] == pytest.approx(first["time_us"], abs=0.01)
    assert "# Out of bounds values : 0 OK" in printed


@pytest.mark.parametrize("collective,placement", [
    ("all_reduce", "in"), ("all_gather", "in"), ("reduce_scatter", "out"), ("all_to_all", "out"),
    ("scatter", "out"), ("gather", "out"), ("broadcast", "in"), ("reduce", "in"), ("sendrecv", "out")])
def test_a_wrong_result_fails_the_oracle_check(collective, placement):
    """One element off by one in the output: the rank holding it reports a wrong result."""
    with RankPool(2, Binding(backend="gloo")) as pool:
        outcomes = pool.run(bench_corrupted_check, collective, placement)
    verdicts = [o.value for o in outcomes]
    assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    checked = [0] if collective in ("reduce", "gather") else [0, 1]  # root-only outputs
    for rank in checked:
        ok, detail = verdicts[rank]
        assert not ok and "wrong" in detail, (rank, detail)


def test_bad_arguments_say_what_is_wrong(capsys):
    assert main(["--backend", "gloo", "--collectives", "all_reduce,allreduce"]) == 2
    assert "unknown ['allreduce']" in capsys.readouterr().err
    assert main(["--backend", "gloo", "-G", "2"]) == 2
    assert "needs GPUs" in capsys.readouterr().err
    assert main(["--backend", "gloo", "-g", "9"]) == 2
    assert "world size(s) [9]" in capsys.readouterr().err


NCCL_TESTS_SAMPLE = """\
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
           8             2     float     sum      -1    24.10    0.00    0.00       0    28.84    0.00    0.00       0
     1048576        262144     float     sum      -1    38.76   27.05   40.58       0    32.20   32.57   48.85       0
"""


def test_comparison_matches_placement_and_marks_goals(tmp_path):
    (tmp_path / "nt-all_reduce-g4.txt").write_text(NCCL_TESTS_SAMPLE)
    theirs = load_nccl_tests(tmp_path)
    assert theirs[("all_reduce", 4, "eager", "in", 8)]["time_us"] == 28.84
    ours = [{"collective": "all_reduce", "world_size": 4, "mode": "eager", "placement": "in", "size": 8,
             "time_us": 30.0, "busbw": 0.0},
            {"collective": "all_reduce", "world_size": 4, "mode": "eager", "placement": "in", "size": 1048576,
             "time_us": 40.0, "busbw": 44.0}]
    lines = compare(ours, theirs)
    assert [line["met"] for line in lines] == [True, False]   # 30/28.84 <= 1.2; 44/48.85 < 0.95
    assert lines[1]["busbw_ratio"] == pytest.approx(44.0 / 48.85)


def test_nccl_tests_cycles_keep_the_median_row(tmp_path):
    """`-N 3` prints the sweep three times: each size keeps the row of median time, and a wrong
    result in any cycle still shows."""
    body = NCCL_TESTS_SAMPLE.splitlines()
    slow = body[2].replace("24.10", "90.00").replace("28.84", "95.00")
    fast = body[2].replace("24.10", "20.00").replace("28.84", "21.00")
    wrong = body[3][:-1] + "3"
    (tmp_path / "nt-all_reduce-g4.txt").write_text("\n".join([*body, slow, wrong, fast, body[3]]) + "\n")
    theirs = load_nccl_tests(tmp_path)
    assert theirs[("all_reduce", 4, "eager", "out", 8)]["time_us"] == 24.10
    assert theirs[("all_reduce", 4, "eager", "in", 8)]["time_us"] == 28.84
    assert theirs[("all_reduce", 4, "eager", "in", 8)]["cycles"] == 3
    assert theirs[("all_reduce", 4, "eager", "in", 1048576)]["wrong"] == "3"
    assert theirs[("all_reduce", 4, "eager", "out", 1048576)]["wrong"] == "0"


def test_plot_from_saved_json(tmp_path):
    """busbw against size, one panel per collective, from saved outputs (matplotlib: the [plot] extra)."""
    pytest.importorskip("matplotlib", reason="the [test] extra (or [plot]); the README's test command installs it")
    from realgpu.bench_report import main as plot_main

    doc = {"environment": {"torch": "2.x", "device": "cpu"}, "results": [
        {"collective": c, "world_size": 2, "mode": "eager", "placement": "out", "size": s, "busbw": s / 1e3}
        for c in ("all_reduce", "scatter") for s in (1024, 4096)]}
    src, png = tmp_path / "b.json", tmp_path / "b.png"
    src.write_text(json.dumps(doc))
    assert plot_main(["--png", str(png), str(src)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_host_overhead_script_says_what_it_needs(capsys):
    """benchmarks/host_overhead.py times GPU layers; without GPUs it says so in one line and exits 2."""
    from benchmarks.host_overhead import main as host_main

    assert host_main(["--gpus", "2"]) == 2
    assert "host_overhead: asked for 2 GPUs; it needs 2 or more and this machine has 0" in capsys.readouterr().err


def test_a_rank_that_starts_late_does_not_inflate_the_others():
    """Rank 1 leaves the pre-timing barrier 0.6 s late; the untimed aligning launch absorbs the wait, so
    no rank's two timed launches hold it (without it rank 0 reported 300 ms a launch)."""
    with RankPool(2, Binding(backend="gloo")) as pool:
        outcomes = pool.run(bench_late_rank_time, 0.6)
    assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    assert max(o.value for o in outcomes) < 100, [o.value for o in outcomes]

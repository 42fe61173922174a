"""The cost model (simgpu/cost_model.py) against the committed H200 measurements, its invariants, the
calibration that made its constants, and the --predict plumbing (simgpu/comm_log.py, the sim backend's
hook, `simgpu run --predict`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_env

from simgpu import comm_log
from realgpu import calibration as cal
from simgpu import collective_facts as facts
from simgpu import cost_model as cm

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "h200-2026-11-22-trials5"
MEASURED = [RESULTS / f for f in ("bench-g2.json", "bench-g4.json", "bench-g2-graph.json", "bench-g4-graph.json")]
KiB, MiB = 1 << 10, 1 << 20

# The target: geometric-mean error <= 8% at sizes >= 64 KB for the five main collectives, on 2 and
# on 4 GPUs, every eager row (test_overall_error_per_gpu_count_and_the_hold_outs). Per (collective, GPU
# count) series the same 8% holds for nine of the ten; all_gather on 2 GPUs is at 9.6%: its host-bound rows
# (64 KiB to 4 MiB, where an eager call costs the host's launch time, not the GPU's) score 15.3%, because
# that launch time still varies between neighbouring sizes of the same run even as a median of 5 runs
# (out of place: 44.4 us at 128 KiB, 54.3 at 256 KiB, 40.8 at 512 KiB, against a floor of 30.3 measured
# below 64 KiB); its GPU-bound rows score 4.8%. It is held to 10%, what the model reaches there, not to the
# target; every series is held to 5% where the GPU is the bottleneck (>= 16 MiB).
TARGET = 0.08
NOISE_LIMITED = {("all_gather", 2): 0.10}


@pytest.fixture(scope="module")
def rows() -> list[cal.Row]:
    return cal.load_measurements(MEASURED)


@pytest.fixture(scope="module")
def h200() -> cm.Machine:
    return cm.machine("h200-nvlink4")


def _error(m: cm.Machine, rows: list[cal.Row], want) -> float:
    n, err = cal._group_error(cal.score(m, rows), want)
    assert n > 0
    return err


@pytest.mark.parametrize("collective", cm.MAIN_COLLECTIVES)
@pytest.mark.parametrize("gpus", [2, 4])
def test_error_target_on_the_committed_measurements(rows, h200, collective: str, gpus: int) -> None:
    series = lambda lo: (lambda r: r.collective == collective and r.n == gpus  # noqa: E731
                         and r.mode == "eager" and r.size >= lo)
    everything = _error(h200, rows, series(cm.SCORED_MIN_BYTES))
    assert everything <= NOISE_LIMITED.get((collective, gpus), TARGET), (collective, gpus, everything)
    gpu_bound = _error(h200, rows, series(cal.GPU_BOUND_MIN_BYTES))
    assert gpu_bound <= 0.05, (collective, gpus, gpu_bound)
    graph = _error(h200, rows, lambda r: r.collective == collective and r.n == gpus and r.mode == "graph"
                   and r.size >= cm.SCORED_MIN_BYTES)
    assert graph <= 0.11, (collective, gpus, graph)  # reduce's CUDA-graph rows are at 9.6-10.3%


def test_overall_error_per_gpu_count_and_the_hold_outs(rows, h200) -> None:
    """The target as the issue sets it: the five main collectives together, on 2 GPUs and on 4 GPUs
    (in-sample 5.8% and 4.0%); and each GPU count's rows predicted by fits that did not see them."""
    main = lambda r: r.collective in cm.MAIN_COLLECTIVES and r.mode == "eager" and r.size >= cm.SCORED_MIN_BYTES  # noqa: E731
    assert _error(h200, rows, main) <= TARGET
    assert _error(h200, rows, lambda r: main(r) and r.size >= cal.GPU_BOUND_MIN_BYTES) <= 0.04
    holdouts = {h.__name__: h(rows, h200) for h in (cal.holdout_alternate_sizes, cal.holdout_other_gpu_count)}
    assert all(cal._group_error(scored, main)[0] == 210 for scored in holdouts.values())
    for gpus in (2, 4):
        on = lambda r, gpus=gpus: main(r) and r.n == gpus  # noqa: E731
        assert _error(h200, rows, on) <= TARGET, gpus
        assert _error(h200, rows, lambda r: on(r) and r.size >= cal.GPU_BOUND_MIN_BYTES) <= 0.04, gpus
        for name, scored in holdouts.items():  # 5.9% / 4.1% (alternate sizes), 6.8% / 4.4% (other GPU count)
            n, err = cal._group_error(scored, on)
            assert n == 105 and err <= TARGET, (name, gpus, err)


def test_calibration_reproduces_the_committed_constants(rows, h200) -> None:
    fitted = cal.calibrate(rows)
    got, want = cal.fitted_constants(fitted), cal.fitted_constants(h200)
    for key, value in want.items():
        pairs = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in pairs:
            g = got[key][sub] if sub else got[key]
            assert abs(g - v) <= max(0.02 * abs(v), 0.01), (key, sub, g, v)
    assert fitted.host_floor_us == cm.H200_HOST_FLOOR_US
    assert fitted.bus_bw_gbs == h200.bus_bw_gbs == 370.8 and fitted.hop_us == h200.hop_us


@pytest.mark.parametrize("name", list(cm.presets()))
def test_monotonic_in_size_and_never_above_the_link(name: str) -> None:
    m = cm.machine(name)
    sizes = sorted({int(2 ** (k / 4)) for k in range(0, 4 * 31)} | {3 * MiB, 96 * MiB + 7})
    for c in facts.COLLECTIVES:
        for n in (1, 2, 3, 4, 8):
            for mode in ("gpu", "eager"):
                times = [cm.predict_us(m, c, s, n, mode) for s in sizes]
                assert all(b >= a for a, b in zip(times, times[1:])), (name, c, n, mode)
            if n == 1:
                continue
            for s in sizes:
                busbw = s * facts.bus_factor(c, n) / (cm.predict_us(m, c, s, n) * 1e3)
                assert busbw <= min(m.bus_bw_gbs, m.link_ceiling_gbs()) * (1 + 1e-9), (name, c, n, s, busbw)


def test_the_ring_model_is_nccls_at_its_defaults() -> None:
    """With NCCL's constants the model gives NCCL's own numbers: its tuning table on an H200 box
    (benchmarks/results/h200-2026-11-22/investigation/inv-debug-nt.txt) has ring all_reduce LL/LL128/Simple at 10.2/25.4/28.8 us on 4 GPUs."""
    m = cm.machine("h100-nvlink4-nccl-defaults").with_params(bus_bw_gbs=360.0, ll_max_bw_gbs=141.0)
    latency = {(a, p): t for t, a, p in cm.candidates(m, "all_reduce", 0, 4)}
    assert [round(latency[("ring", p)], 1) for p in cm.PROTOCOLS] == [10.2, 25.4, 28.8]
    size = 64 * MiB
    algbw = {p: size / ((t - latency[(a, p)]) * 1e3) for t, a, p in cm.candidates(m, "all_reduce", size, 4)
             if a == "ring"}
    assert [round(algbw[p], 1) for p in cm.PROTOCOLS] == [94.0, 220.8, 240.0]  # NCCL's bandwidth column
    assert cm.predict(m, "all_reduce", 4, 4).proto == "LL"  # NCCL: "4 Bytes -> Algo RING proto LL"


def test_bus_factors_are_nccl_tests_formulas_for_every_name_the_project_uses() -> None:
    """nccl-tests' doc/PERFORMANCE.md: all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n;
    broadcast, reduce, sendrecv 1. Every spec and benchmark name must resolve in the one registry."""
    from conformance.spec import all_specs
    from realgpu.bench_ops import COLLECTIVES

    assert facts.bus_factor("all_reduce", 4) == 1.5 and facts.bus_factor("allreduce", 8) == 1.75
    assert facts.bus_factor("all_gather_into_tensor", 8) == 0.875 and facts.bus_factor("alltoall", 2) == 0.5
    assert facts.bus_factor("broadcast", 8) == facts.bus_factor("send", 2) == 1.0
    assert facts.bus_factor("barrier", 4) == 0.0 and facts.bus_factor("gather_object", 4) == 0.0
    for name in [*(n for n in all_specs() if "." not in n), *COLLECTIVES]:  # family.x: not nccl-tests'
        facts.bus_factor(name, 4)  # KeyError for a name the registry does not know
    with pytest.raises(KeyError, match="unknown collective 'all_reduce_twice'"):
        facts.bus_factor("all_reduce_twice", 4)


def test_unknown_machine_is_one_line_naming_the_presets(tmp_path: Path) -> None:
    with pytest.raises(cm.UnknownMachine) as info:
        cm.machine("h900")
    message = str(info.value)
    assert "\n" not in message and all(name in message for name in cm.presets())
    done = subprocess.run([sys.executable, "-m", "realgpu.calibration", "--machine", "h900", "--measured",
                           str(MEASURED[0])], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.strip() == f"realgpu.calibration: {message}"
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--predict", "h900", "--gpus", "2", "x.py"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode != 0 and done.stderr.strip() == f"simgpu run: --predict: {message}"


def test_uncalibrated_presets_say_so() -> None:
    for name, m in cm.presets().items():
        assert m.calibrated == (name == "h200-nvlink4")
        assert ("UNCALIBRATED" in m.summary()) == (not m.calibrated)


def test_committed_report_is_what_the_command_prints(rows, h200) -> None:
    committed = (RESULTS / "predicted-vs-measured.md").read_text()
    command, _, body = committed.partition("\n")
    assert command.startswith("Command: `python -m realgpu.calibration --measured")
    folder = RESULTS.relative_to(ROOT).as_posix()
    assert all(f"{folder}/{path.name}" in command for path in MEASURED), command
    assert f"--nccl-tests {folder}/nccl-tests-mpi " in command and "--fit" not in command, command
    holdouts = {"alternate sizes": cal.holdout_alternate_sizes(rows, h200),
                "other GPU count": cal.holdout_other_gpu_count(rows, h200)}
    nccl_tests = cal.load_nccl_tests(RESULTS / "nccl-tests-mpi")
    assert body.strip() == cal.report(h200, rows, "", holdouts, nccl_tests=nccl_tests).strip()


def test_report_rows_per_gpu_count_and_prose_from_the_data(rows, h200) -> None:
    """The summary has an overall row of the five main collectives per GPU count (with its verdict) and
    one over all; the prose under it names the worst host-bound row of the rows given, not a fixed one."""
    text = cal.report(h200, rows)
    main = lambda r, n=None: (r.collective in cm.MAIN_COLLECTIVES and r.mode == "eager"  # noqa: E731
                              and r.size >= cm.SCORED_MIN_BYTES and (n is None or r.n == n))
    for gpus in (2, 4, None):
        err = _error(h200, rows, lambda r, g=gpus: main(r, g))
        row = f"| **overall, five main** | {gpus or 'all'} | {100 * err:.1f}% (" + ("105" if gpus else "210") + ")"
        assert row in text and text.split(row)[1].split("\n")[0].endswith("| yes |"), row
    bound = [s for s in cal.score(h200, rows) if main(s.row)
             and cm.predict(h200, s.row.collective, s.row.size, s.row.n, "eager").limited_by == "host"]
    worst = max(bound, key=lambda s: s.error)
    assert (f"The worst host-bound row: {worst.row.collective}, {worst.row.n} GPUs, "
            f"{'out of place' if worst.row.placement == 'out' else 'in place'}, {cal._size(worst.row.size)}: "
            f"{worst.row.time_us:.1f} us measured") in text
    only4 = cal.report(h200, [r for r in rows if r.n == 4])
    assert "| **overall, five main** | 2 |" not in only4 and "every GPU count" in only4


@pytest.mark.parametrize("folder", ["nccl-tests-mpi", "nccl-tests"])
def test_nccl_tests_cross_check(h200, folder: str) -> None:
    """Never fitted on: nccl-tests (one process per GPU under MPI, and one process driving every GPU), the
    model less torch's per-call overhead, from 16 MiB up: 3.0% and 3.1%."""
    import dataclasses

    nt = cal.load_nccl_tests(RESULTS / folder)
    assert {(r.collective, r.n, r.mode) for r in nt} >= {(c, n, m) for c in facts.COLLECTIVES for n in (2, 4)
                                                          for m in ("eager", "graph")}
    bare = dataclasses.replace(h200, call_overhead_us=0.0, host_floor_us={})
    big = lambda r: r.collective in cm.MAIN_COLLECTIVES and r.mode == "eager" and r.size >= cal.GPU_BOUND_MIN_BYTES  # noqa: E731
    assert _error(bare, nt, big) <= 0.04


# ----------------------------------------------------------------------------- what the ranks record
class _T:
    """A stand-in tensor: numel and element_size are all comm_log reads."""

    def __init__(self, numel: int, elt: int = 4):
        self._n, self._e = numel, elt

    def numel(self) -> int:
        return self._n

    def element_size(self) -> int:
        return self._e


def test_bytes_of_the_list_forms() -> None:
    n, chunk = 4, 1000
    assert comm_log.nccl_tests_bytes("all_gather", n, ([[_T(chunk)] * n], [_T(chunk)])) == 4 * n * chunk
    assert comm_log.nccl_tests_bytes("reduce_scatter", n, ([_T(chunk)], [[_T(chunk)] * n])) == 4 * n * chunk
    assert comm_log.nccl_tests_bytes("all_to_all", n, ([_T(chunk)] * n, [_T(chunk)] * n)) == 4 * n * chunk
    assert comm_log.nccl_tests_bytes("gather", n, ([], [_T(chunk)])) == 4 * n * chunk  # a non-root
    assert comm_log.nccl_tests_bytes("all_reduce_coalesced", n, ([_T(10), _T(20, 2)],)) == 80
    assert comm_log.nccl_tests_bytes("barrier", n, ()) == 4


def run_bench_launches(ctx, size: int) -> None:
    """Rank function: every benchmarked collective once, with realgpu-bench's own buffers and calls."""
    from realgpu.bench_ops import COLLECTIVES, Buffers, Plan, counts

    for name, col in COLLECTIVES.items():
        chunk, total = counts(col, size, 4, ctx.world_size)
        plan = Plan(name, [size], check=False, flavor="nccl")
        Buffers(ctx, col, chunk, total, plan, col.placements[0]).launch()


def test_the_sim_backend_records_bytes_as_nccl_tests_counts_them(tmp_path: Path) -> None:
    from realgpu.bench_ops import COLLECTIVES, counts
    from simgpu.pool import Binding, RankPool

    n, size = 4, 1 * MiB + 100  # not a multiple of the chunking: nccl-tests rounds down, so must we
    env = ((comm_log.ENV_MACHINE, "h200-nvlink4"), (comm_log.ENV_DIR, str(tmp_path)))
    pool = RankPool(n, Binding("sim", env=env, init_timeout=60.0), timeout=120.0)
    try:
        outcomes = pool.run(run_bench_launches, size)
        assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    finally:
        pool.close()  # the ranks destroy their process groups: each writes its table
    logs = comm_log.read_logs(tmp_path)
    assert sorted(log["rank"] for log in logs) == list(range(n))
    for log in logs:
        got = {}
        for op, group, nbytes, calls in log["calls"]:
            got.setdefault(facts.ALIASES.get(op, op), []).append((op, group, nbytes, calls))
        for name, col in COLLECTIVES.items():
            _, total = counts(col, size, 4, n)
            if name == "sendrecv":
                assert sorted(got[name]) == [("recv", 2, total * 4, 1), ("send", 2, total * 4, 1)], got[name]
            else:
                assert [(g, b, c) for _, g, b, c in got[name]] == [(n, total * 4, 1)], (name, got[name])
    lines = comm_log.summary_lines(logs, "h200-nvlink4")
    assert lines[1].split() == ["collective", "calls/rank", "bytes/rank", "GPU", "time/rank", "max", "over", "ranks"]


def test_recording_is_off_by_default(monkeypatch) -> None:
    monkeypatch.delenv(comm_log.ENV_MACHINE, raising=False)
    comm_log.reset()
    comm_log.record("all_reduce", 2, ([_T(8)],))
    assert comm_log.ACTIVE is False and not comm_log._table
    comm_log.reset()


def test_simgpu_run_predict_prints_the_table(tmp_path: Path) -> None:
    script = tmp_path / "tiny.py"
    script.write_text(
        "import sys, torch, torch.distributed as dist, torch.multiprocessing as mp\n"
        "def worker(rank, init):\n"
        "    dist.init_process_group('nccl', init_method=init, rank=rank, world_size=2)\n"
        "    torch.cuda.set_device(rank)\n"
        "    t = torch.ones(1 << 20, device='cuda')\n"
        "    for _ in range(3):\n"
        "        dist.all_reduce(t)\n"
        "    for _ in range(2):\n"
        "        dist.broadcast(t, src=0)\n"
        "    dist.destroy_process_group()\n"
        "    if rank == 0:\n"
        "        print('OK tiny')\n"
        "if __name__ == '__main__':\n"
        "    mp.spawn(worker, args=(f'file://{sys.argv[1]}',), nprocs=2)\n")
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--predict", "h200-nvlink4", "--gpus", "2",
                           str(script), str(tmp_path / "rendezvous")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if not k.startswith("SIMGPU_PREDICT")})
    assert done.returncode == 0 and "OK tiny" in done.stdout, done.stdout + done.stderr
    table = {line.split()[0]: line.split() for line in done.stderr.splitlines() if line.strip()}
    assert "predicted" in table and "h200-nvlink4" in " ".join(table["predicted"])
    m = cm.machine("h200-nvlink4")
    ar, bc = cm.predict(m, "all_reduce", 4 * MiB, 2).gpu_us, cm.predict(m, "broadcast", 4 * MiB, 2).gpu_us
    assert table["all_reduce"][:4] == ["all_reduce", "3", "12.0", "MiB"]
    assert table["broadcast"][:4] == ["broadcast", "2", "8.0", "MiB"]
    assert table["total"][:4] == ["total", "5", "20.0", "MiB"]
    assert float(table["all_reduce"][4]) == pytest.approx(3 * ar, abs=0.1)
    assert float(table["total"][4]) == pytest.approx(3 * ar + 2 * bc, abs=0.1)
    assert "0:" in table["per"] and "1:" in table["per"]


def test_pytest_predict_prints_the_section(tmp_path: Path) -> None:
    env = {k: v for k, v in child_env(HYPOTHESIS_STORAGE_DIRECTORY=str(tmp_path / "hypothesis")).items()
           if not k.startswith("SIMGPU_PREDICT")}
    base = [sys.executable, "-m", "pytest", "conformance/test_collectives.py", "-p", "no:cacheprovider", "-q",
            "--max-world-size", "2", "--report-dir", str(tmp_path / "reports"), "--hypothesis-seed=0"]
    done = subprocess.run([*base, "-k", "[broadcast-float32]", "--predict", "h200-nvlink4"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("=") and "predicted GPU communication" in line)
    section = []
    for line in lines[start + 1:]:
        if line.startswith("="):
            break
        section.append(line)
    rows = {line.split()[0]: line.split() for line in section if line.strip()}
    assert "broadcast" in rows and "total" in rows and "per" in rows, section
    assert rows["per"][:2] == ["per", "rank/world:"] and "0/1:" in rows["per"] and "1/2:" in rows["per"]
    bad = subprocess.run([*base, "--predict", "h900"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=env)
    assert bad.returncode != 0
    assert "--predict: unknown machine preset 'h900'; known presets: " + ", ".join(cm.presets()) in bad.stderr

"""Calibration of simgpu's cost model (simgpu/cost_model.py) against GPU measurements, and the
predicted-vs-measured report: benchmarks' layer, above the runtime model it fits.

    python -m realgpu.calibration --measured bench-g2.json bench-g4.json [--machine h200-nvlink4]
                                  [--fit] [--no-holdout] [--nccl-tests DIR] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from simgpu.collective_facts import ALIASES, COLLECTIVES
from simgpu.cost_model import (ERROR_DEFINITION, MAIN_COLLECTIVES, SCORED_MIN_BYTES, Machine,
                               UnknownMachine, chosen, machine, predict, presets)

# ----------------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class Row:
    """One measured figure: a collective at one size on n GPUs, eager or CUDA-graph, one placement."""

    collective: str
    n: int
    mode: str          # "eager" or "graph"
    placement: str     # "out" or "in"
    size: int          # bytes as nccl-tests counts them
    time_us: float
    source: str = ""


def load_measurements(paths: Iterable[str | Path]) -> list[Row]:
    """Rows of realgpu-bench JSON files (`realgpu-bench --json`), eager and CUDA-graph mode."""
    rows = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        if doc.get("tool") != "realgpu.bench" or "results" not in doc:
            raise ValueError(f"{path}: not a realgpu-bench JSON file (no 'results')")
        for r in doc["results"]:
            if r["size"] <= 0 or r["time_us"] <= 0:
                continue
            mode = "graph" if str(r["mode"]).startswith("graph") else "eager"
            rows.append(Row(r["collective"], int(r["world_size"]), mode, r["placement"], int(r["size"]),
                            float(r["time_us"]), Path(path).name))
    return rows


def load_nccl_tests(folder: str | Path) -> list[Row]:
    """Rows of nccl-tests outputs named nt-<binary>-g<N>[-graph].txt (benchmarks/results/*/nccl-tests/)."""
    from realgpu.bench_report import read_nccl_tests_folder

    return [Row(r["collective"], r["gpus"], r["mode"], r["placement"], r["size"], r["time_us"], "nccl-tests")
            for r in read_nccl_tests_folder(folder) if r["size"] > 0 and r["time_us"] > 0]


def measured_floors(rows: Iterable[Row], below: int = SCORED_MIN_BYTES) -> dict[str, dict[int, float]]:
    """The host launch floor per collective and rank count: the median eager time below `below` bytes,
    where every call is far from the link's bandwidth (a measurement, not a fitted parameter)."""
    times: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        if r.mode == "eager" and r.size < below:
            times.setdefault((r.collective, r.n), []).append(r.time_us)
    out: dict[str, dict[int, float]] = {}
    for (c, n), ts in sorted(times.items()):
        out.setdefault(c, {})[n] = round(statistics.median(ts), 1)
    return out


def predict_rows(m: Machine, rows: Sequence[Row]) -> list[float]:
    """The model's figure for each measured row (its mode decides GPU time or the eager floor)."""
    import numpy as np

    if not rows:
        return []
    gpu = chosen(m, [r.collective for r in rows], [r.size for r in rows], [r.n for r in rows])[0]
    floors = np.array([m.floor_us(r.collective, r.n) if r.mode == "eager" else 0.0 for r in rows])
    return [float(x) for x in np.maximum(gpu, floors)]


def relative_error(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def geomean_error(pairs: Iterable[tuple[float, float]]) -> float:
    """exp(mean(log(1 + |pred - meas| / meas))) - 1 over (pred, meas) pairs; nan when empty."""
    logs = [math.log1p(relative_error(p, m)) for p, m in pairs]
    return math.exp(sum(logs) / len(logs)) - 1 if logs else float("nan")


# ----------------------------------------------------------------------------- calibration
# The fitted parameters and how each is kept in range: "log" (positive), "sq" (>= 0, may be 0).
FIT_PARAMS: tuple[tuple[str, str], ...] = (
    ("ll_max_bw_gbs", "log"), ("call_overhead_us", "log"), ("p2p_latency_us", "log"),
    ("p2p_bw_gbs", "log"), ("fill_fraction", "log"), ("fill_cap_us", "log"),
) + tuple((f"passes.{c}", "log") for c in COLLECTIVES)


def _get(m: Machine, name: str) -> float:
    if "." in name:
        attr, key = name.split(".")
        return float(getattr(m, attr).get(key, 0.0))
    return float(getattr(m, name))


def _set(m: Machine, values: dict[str, float]) -> Machine:
    changes: dict[str, Any] = {}
    for name, v in values.items():
        if "." in name:
            attr, key = name.split(".")
            changes.setdefault(attr, dict(getattr(m, attr)))[key] = v
        else:
            changes[name] = v
    return dataclasses.replace(m, **changes)


# Where every fit starts: NCCL's defaults for NVLink4 (tuning.cc) and round guesses for the rest.
START: dict[str, float] = {"bus_bw_gbs": 370.0, "hop_us.LL": 0.6, "hop_us.LL128": 1.9, "hop_us.Simple": 3.4,
                           "ll_max_bw_gbs": 141.0, "call_overhead_us": 3.0, "p2p_latency_us": 8.4,
                           "p2p_bw_gbs": 370.0, "fill_fraction": 0.1, "fill_cap_us": 10.0,
                           **{f"passes.{c}": 0.25 for c in COLLECTIVES}}


def fit_rows(rows: Iterable[Row]) -> list[Row]:
    """What calibration fits: eager rows from 64 KB up (below, the host floor hides the GPU), and
    every CUDA-graph row (the GPU's own time, 8 B up)."""
    return [r for r in rows if r.mode == "graph" or r.size >= SCORED_MIN_BYTES]


def calibrate(rows: Sequence[Row], base: Machine | None = None, iterations: int = 100) -> Machine:
    """Fit the machine's free parameters (FIT_PARAMS) to measured rows: least squares on
    log(predicted / measured), Levenberg-Marquardt (numpy only). Host floors are measured from the
    eager rows below 64 KB first; the fit uses fit_rows(rows)."""
    import numpy as np

    base = base or presets()["h200-nvlink4"]
    floors = measured_floors(rows)
    m0 = dataclasses.replace(base, host_floor_us=floors)
    data = fit_rows(rows)
    if not data:
        raise ValueError("calibrate: no rows to fit (need eager rows from 64 KB up or CUDA-graph rows)")
    names = [r.collective for r in data]
    size = np.array([r.size for r in data], dtype=float)
    ranks = np.array([r.n for r in data], dtype=float)
    floor = np.array([m0.floor_us(r.collective, r.n) if r.mode == "eager" else 0.0 for r in data])
    logt = np.log([r.time_us for r in data])
    present = {ALIASES.get(c, c) for c in names}
    params = [(k, how) for k, how in FIT_PARAMS if not k.startswith("passes.") or k.split(".")[1] in present]

    def encode(m: Machine) -> Any:
        return np.array([math.log(max(_get(m, k), 1e-5)) if how == "log" else math.sqrt(max(_get(m, k), 0.0))
                         for k, how in params])

    def decode(x: Any) -> Machine:
        return _set(m0, {k: (math.exp(min(max(v, -12.0), 12.0)) if how == "log" else v * v)
                         for (k, how), v in zip(params, x)})

    def residuals(x: Any) -> Any:
        gpu = chosen(decode(x), names, size, ranks)[0]
        return np.log(np.maximum(gpu, floor)) - logt

    x = encode(_set(m0, START))  # always from NCCL's defaults: the fit does not depend on the preset's numbers
    x = _levenberg_marquardt(residuals, x, iterations)
    fitted = decode(x)
    rounded = {k: round(_get(fitted, k), 3) for k, _ in params}
    return dataclasses.replace(_set(fitted, rounded), calibrated=True)


def _levenberg_marquardt(fun: Any, x: Any, iterations: int) -> Any:
    import numpy as np

    r = fun(x)
    cost = float(r @ r)
    lam = 1e-2
    for _ in range(iterations):
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            h = 1e-6 * max(1.0, abs(x[j]))
            step = x.copy()
            step[j] += h
            jac[:, j] = (fun(step) - r) / h
        a = jac.T @ jac
        g = jac.T @ r
        improved = False
        while lam < 1e12:
            dx = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            r_new = fun(x + dx)
            new_cost = float(r_new @ r_new)
            if np.isfinite(new_cost) and new_cost < cost:
                gain = cost - new_cost
                x, r, cost = x + dx, r_new, new_cost
                lam = max(lam / 3, 1e-9)
                improved = True
                break
            lam *= 4
        if not improved or gain < 1e-12 * max(cost, 1e-30):
            break
    return x


def fitted_constants(m: Machine) -> dict[str, Any]:
    """The calibrated numbers, as H200_FIT and H200_HOST_FLOOR_US hold them."""
    out: dict[str, Any] = {}
    for k, _ in FIT_PARAMS:
        if "." in k:
            attr, key = k.split(".")
            if key in getattr(m, attr) or attr != "passes":
                out.setdefault(attr, {})[key] = _get(m, k)
        else:
            out[k] = _get(m, k)
    return out


# ----------------------------------------------------------------------------- evaluation
GPU_BOUND_MIN_BYTES = 16 << 20  # from here up every main collective's GPU time is above the host floor


@dataclass
class Scored:
    row: Row
    predicted: float

    @property
    def error(self) -> float:
        return relative_error(self.predicted, self.row.time_us)


def score(m: Machine, rows: Sequence[Row]) -> list[Scored]:
    return [Scored(r, p) for r, p in zip(rows, predict_rows(m, rows))]


def holdout_alternate_sizes(rows: Sequence[Row], base: Machine) -> list[Scored]:
    """Every row predicted by a fit that did not see its size: fit on the sizes 2^k with k even,
    predict those with k odd, and the other way round. Host floors stay the measured ones (below
    64 KB, outside every scored range)."""
    floors = measured_floors(rows)
    out = []
    for parity in (0, 1):
        train = [r for r in rows if int(math.log2(r.size)) % 2 == parity]
        test = [r for r in rows if int(math.log2(r.size)) % 2 != parity]
        fitted = dataclasses.replace(calibrate(train, base), host_floor_us=floors)
        out += score(fitted, test)
    return out


def holdout_other_gpu_count(rows: Sequence[Row], base: Machine) -> list[Scored]:
    """Each GPU count predicted by a fit to the other GPU count(s) only (floors: measured, below 64 KB)."""
    floors = measured_floors(rows)
    out = []
    for n in sorted({r.n for r in rows}):
        train = [r for r in rows if r.n != n]
        if not train:
            continue
        fitted = dataclasses.replace(calibrate(train, base), host_floor_us=floors)
        out += score(fitted, [r for r in rows if r.n == n])
    return out


def _group_error(scored: Iterable[Scored], want: Any) -> tuple[int, float]:
    pairs = [(s.predicted, s.row.time_us) for s in scored if want(s.row)]
    return len(pairs), geomean_error(pairs)


def _fmt_err(n_err: tuple[int, float]) -> str:
    n, err = n_err
    return "-" if n == 0 else f"{100 * err:.1f}% ({n})"


def _size(b: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def _members(collectives: Sequence[str], n: int | None = None) -> Any:
    """Rows of these collectives (on n GPUs, or on any count when n is None)."""
    return lambda r: r.collective in collectives and (n is None or r.n == n)


def _overall_groups(rows: Sequence[Row], members: Sequence[str]) -> list[tuple[str, Any]]:
    """(GPUs column, row filter) for an overall row per GPU count present, then one over all counts."""
    return [(str(n), _members(members, n)) for n in sorted({r.n for r in rows})] + [("all", _members(members))]


def _ranges(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"


def crosscheck_lines(m: Machine, nccl_tests: Sequence[Row], target: float = 0.08) -> list[str]:
    """nccl-tests, never fitted on: the model without torch's per-call overhead and without a host
    floor (nccl-tests' eager launches have their own, smaller one). Every figure in the text is
    computed from the rows given."""
    bare = dataclasses.replace(m, call_overhead_us=0.0, host_floor_us={})
    scored = score(bare, nccl_tests)
    keys = sorted({(r.collective, r.n) for r in nccl_tests}, key=lambda k: (COLLECTIVES.index(k[0]), k[1]))
    big = f"eager, >= {_size(GPU_BOUND_MIN_BYTES)}"
    lines = ["## Cross-check: nccl-tests (not fitted on)", "",
             "nccl-tests outputs from the folder given to `--nccl-tests` (NCCL called directly, without "
             "torch.distributed), predicted by the same constants less torch's "
             f"per-call overhead ({m.call_overhead_us:.2f} us). Eager rows only from {_size(GPU_BOUND_MIN_BYTES)} "
             "up (below, nccl-tests' own launch rate sets the time); CUDA-graph rows from "
             f"{_size(SCORED_MIN_BYTES)} to 1 MiB and over all sizes.", "",
             f"| collective | GPUs | {big} | graph, >= {_size(SCORED_MIN_BYTES)} | graph, all sizes |",
             "|---|---|---|---|---|"]
    groups = [(c, str(n), lambda r, c=c, n=n: r.collective == c and r.n == n) for c, n in keys]
    groups += [("**overall, five main**", ns, own) for ns, own in _overall_groups(nccl_tests, MAIN_COLLECTIVES)]
    for label, ns, own in groups:
        cells = [_fmt_err(_group_error(scored, lambda r, f=own: f(r) and r.mode == "eager"
                                       and r.size >= GPU_BOUND_MIN_BYTES)),
                 _fmt_err(_group_error(scored, lambda r, f=own: f(r) and r.mode == "graph"
                                       and r.size >= SCORED_MIN_BYTES)),
                 _fmt_err(_group_error(scored, lambda r, f=own: f(r) and r.mode == "graph"))]
        lines.append(f"| {label} | {ns} | " + " | ".join(cells) + " |")
    notes = []
    n_big, err_big = _group_error(scored, lambda r: r.collective in MAIN_COLLECTIVES and r.mode == "eager"
                                  and r.size >= GPU_BOUND_MIN_BYTES)
    if n_big:
        verdict = "carries over" if err_big <= target else "does not carry over"
        notes.append(f"The large-size side (bandwidth, passes, fill) {verdict} to nccl-tests: "
                     f"{100 * err_big:.1f}% over the five main collectives from {_size(GPU_BOUND_MIN_BYTES)} up.")
    graph = [s for s in scored if s.row.collective in MAIN_COLLECTIVES and s.row.mode == "graph"]
    if graph:
        smallest: dict[tuple[str, int], int] = {}
        for s in graph:
            key = (s.row.collective, s.row.n)
            smallest[key] = min(smallest.get(key, s.row.size), s.row.size)
        tiny = [s for s in graph if s.row.size == smallest[(s.row.collective, s.row.n)]]
        sizes = [_size(b) for b in sorted({s.row.size for s in tiny})]
        ratio = statistics.median(s.row.time_us / s.predicted for s in tiny)
        notes.append("The small-size side is torch.distributed's: the model's latency there is NCCL's default "
                     "constants plus the per-call overhead fitted to torch's times. At each main series' smallest "
                     f"CUDA-graph size ({', '.join(sizes)}) nccl-tests measures "
                     f"{_ranges([s.row.time_us for s in tiny])} us, NCCL's constants alone give "
                     f"{_ranges([s.predicted for s in tiny])} us (measured / predicted: median {ratio:.2f}).")
    return lines + ["", " ".join(notes), ""] if notes else lines + [""]


def _host_bound_lines(m: Machine, scored: Sequence[Scored], min_bytes: int, target: float) -> list[str]:
    """Where the main collectives miss the target, and the worst host-bound eager row: computed from the
    scored rows (a host-bound row is one whose prediction is the host floor)."""
    main = [s for s in scored if s.row.collective in MAIN_COLLECTIVES and s.row.mode == "eager"
            and s.row.size >= min_bytes]
    if not main:
        return []
    host = {id(s) for s in main if predict(m, s.row.collective, s.row.size, s.row.n, "eager").limited_by == "host"}
    series = sorted({(s.row.collective, s.row.n) for s in main}, key=lambda k: (COLLECTIVES.index(k[0]), k[1]))
    missed = [(c, n) for c, n in series
              if _group_error(main, lambda r, c=c, n=n: r.collective == c and r.n == n)[1] > target]
    text = []
    if missed:
        in_missed = [s for s in main if (s.row.collective, s.row.n) in missed]
        split = [_fmt_err(_group_error([s for s in in_missed if (id(s) in host) == h], lambda r: True))
                 for h in (True, False)]
        names = ", ".join(f"{c} on {n} GPUs" for c, n in missed)
        text.append(f"Missing the target per (collective, GPU count): {names}. There the host-bound eager rows "
                    f"(marked `host` below: the prediction is the host floor) score {split[0]}, the GPU-bound "
                    f"ones {split[1]}.")
    else:
        text.append("Every main collective meets the target on every GPU count.")
    bound = [s for s in main if id(s) in host]
    if bound:
        worst = max(bound, key=lambda s: s.error)
        r = worst.row
        near = {s.row.size: s.row.time_us for s in scored if (s.row.collective, s.row.n, s.row.mode, s.row.placement)
                == (r.collective, r.n, r.mode, r.placement) and s.row.size in (r.size // 2, r.size * 2)}
        around = "; ".join(f"{_size(size)}: {t:.1f} us" for size, t in sorted(near.items()))
        place = "out of place" if r.placement == "out" else "in place"
        text.append("A host-bound eager call costs the host's launch time, which varies between neighbouring sizes "
                    "of the same run, while the model's floor is one number per collective and GPU count. The worst "
                    f"host-bound row: {r.collective}, {r.n} GPUs, {place}, {_size(r.size)}: {r.time_us:.1f} us "
                    f"measured against a floor of {worst.predicted:.1f} us ({100 * worst.error:.0f}%)"
                    + (f"; neighbouring sizes {around}" if around else "") + ".")
    text.append(f"From {_size(GPU_BOUND_MIN_BYTES)} up, where the GPU sets the time, see the second column.")
    return [" ".join(text), ""]


def report(m: Machine, rows: Sequence[Row], command: str = "", holdouts: dict[str, list[Scored]] | None = None,
           min_bytes: int = SCORED_MIN_BYTES, target: float = 0.08, nccl_tests: Sequence[Row] = ()) -> str:
    """The markdown report: summary per (collective, GPU count) and overall per GPU count, constants,
    every op and size."""
    scored = score(m, rows)
    holdouts = holdouts or {}
    keys = sorted({(r.collective, r.n) for r in rows}, key=lambda k: (COLLECTIVES.index(k[0])
                                                                       if k[0] in COLLECTIVES else 99, k[1]))
    lines = []
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += [f"# Predicted against measured: {m.name}", "",
              f"Machine: {m.summary()}.", f"Measured: {', '.join(sorted({r.source for r in rows}))}.",
              f"Error: {ERROR_DEFINITION}, over the rows named in each column (row count in brackets).",
              "Eager rows are predicted as max(host launch floor, GPU time); CUDA-graph rows as the GPU time.", ""]
    lines += ["## Summary", "",
              f"- **fit, >= {_size(min_bytes)}**: every eager row from {_size(min_bytes)} up (both placements) against "
              "the model whose constants were fitted to all the measurements: the in-sample figure the target "
              f"(<= {100 * target:.0f}% for the five main collectives, on each GPU count) is set on.",
              f"- **fit, >= {_size(GPU_BOUND_MIN_BYTES)}**: the same, GPU-bound rows only (there every main "
              "collective's GPU time is above the host floor): the GPU model itself.",
              f"- **graph, >= {_size(min_bytes)}**: CUDA-graph rows ({_size(min_bytes)} to 1 MiB): GPU time without the host.",
              "- **hold-out, alternate sizes**: each eager row >= "
              f"{_size(min_bytes)} predicted by a fit that never saw its size (fit on sizes 2^k, k even; predict "
              "k odd; and the other way round).",
              "- **hold-out, other GPU count**: each GPU count's eager rows >= "
              f"{_size(min_bytes)} predicted by a fit to the other GPU count only.",
              "- Host floors (the eager launch rate) are measured from the eager rows below "
              f"{_size(min_bytes)} in every column; they are never fitted.",
              "- **overall, five main** rows: one per GPU count (the target is set per GPU count) and one over "
              "all of them.", ""]
    cols = ["fit, >= " + _size(min_bytes), "fit, >= " + _size(GPU_BOUND_MIN_BYTES),
            "graph, >= " + _size(min_bytes)] + [f"hold-out, {k}" for k in holdouts] + ["target met"]
    lines += ["| collective | GPUs | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]

    def summary_row(label: str, ns: str, own: Any, main: bool) -> str:
        want_e = lambda r: own(r) and r.mode == "eager" and r.size >= min_bytes  # noqa: E731
        fit = _group_error(scored, want_e)
        cells = [_fmt_err(fit),
                 _fmt_err(_group_error(scored, lambda r: own(r) and r.mode == "eager"
                                       and r.size >= GPU_BOUND_MIN_BYTES)),
                 _fmt_err(_group_error(scored, lambda r: own(r) and r.mode == "graph" and r.size >= min_bytes))]
        cells += [_fmt_err(_group_error(h, want_e)) for h in holdouts.values()]
        met = ("yes" if fit[1] <= target else "**no**") if main and fit[0] else "(no target)"
        return f"| {label} | {ns} | " + " | ".join(cells) + f" | {met} |"

    for c, n in keys:
        lines.append(summary_row(c, str(n), lambda r, c=c, n=n: r.collective == c and r.n == n,
                                 c in MAIN_COLLECTIVES))
    for ns, own in _overall_groups(rows, MAIN_COLLECTIVES):
        lines.append(summary_row("**overall, five main**", ns, own, True))
    lines.append(summary_row("**overall, all nine**", "all", _members(COLLECTIVES), False))
    lines += [""] + _host_bound_lines(m, scored, min_bytes, target)
    fixed = {"bus_bw_gbs": m.bus_bw_gbs, "base_us": m.base_us, "hop_us": m.hop_us,
             "ll128_fraction": m.ll128_fraction, "ll_fraction": m.ll_fraction}
    if nccl_tests:
        lines += crosscheck_lines(m, nccl_tests, target)
    lines += ["## Constants", "", "```", "fixed (NCCL's model) = " + json.dumps(fixed),
              "fitted = " + json.dumps(fitted_constants(m)),
              "host_floor_us (measured below 64 KiB) = " + json.dumps(m.host_floor_us), "```", ""]
    lines += ["## Every op and size", "",
              "Eager: measured out-of-place / in-place where both exist; the error is of each placement. "
              "`host` marks predictions set by the host floor.", ""]
    by_key: dict[tuple, dict] = {}
    for s in scored:
        r = s.row
        by_key.setdefault((r.collective, r.n), {}).setdefault(r.size, {})[(r.mode, r.placement)] = s
    for c, n in keys:
        lines += [f"### {c}, {n} GPUs", "",
                  "| size | eager measured us | eager predicted us | error | graph measured us | "
                  "graph predicted us | error | GPU algo/proto |", "|---|---|---|---|---|---|---|---|"]
        for size, cells in sorted(by_key[(c, n)].items()):
            p = predict(m, c, size, n, "eager")
            parts = []
            for mode in ("eager", "graph"):
                got = [cells[(mode, pl)] for pl in ("out", "in") if (mode, pl) in cells]
                if not got:
                    parts += ["-", "-", "-"]
                    continue
                meas = " / ".join(f"{g.row.time_us:.1f}" for g in got)
                pred = f"{got[0].predicted:.1f}" + (" host" if mode == "eager" and p.limited_by == "host" else "")
                err = " / ".join(f"{100 * g.error:.0f}%" for g in got)
                parts += [meas, pred, err]
            lines.append(f"| {_size(size)} | " + " | ".join(parts) + f" | {p.algo}/{p.proto} |")
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m realgpu.calibration",
                                description="Predicted against measured collective times (simgpu's cost model).")
    p.add_argument("--measured", nargs="+", required=True, metavar="JSON",
                   help="realgpu-bench --json files (eager and/or CUDA-graph mode)")
    p.add_argument("--machine", default="h200-nvlink4", help=f"machine preset (one of: {', '.join(presets())})")
    p.add_argument("--fit", action="store_true",
                   help="fit the preset's parameters to the measurements first and print the fitted constants")
    p.add_argument("--no-holdout", action="store_true", help="skip the hold-out fits")
    p.add_argument("--nccl-tests", default=None, metavar="DIR",
                   help="also compare with nccl-tests outputs nt-<binary>-g<N>[-graph].txt in DIR (not fitted on)")
    p.add_argument("--out", default=None, metavar="FILE.md", help="also write the report here")
    args = p.parse_args(argv)
    try:
        m = machine(args.machine)
        rows = load_measurements(args.measured)
        nccl_tests = load_nccl_tests(args.nccl_tests) if args.nccl_tests else []
        if args.nccl_tests and not nccl_tests:
            raise ValueError(f"--nccl-tests {args.nccl_tests}: no nt-<binary>-g<N>[-graph].txt files there")
    except (UnknownMachine, OSError, ValueError) as exc:
        print(f"realgpu.calibration: {exc}", file=sys.stderr)
        return 2
    if args.fit:
        m = calibrate(rows, m)
        print("# fitted constants (simgpu/cost_model.py holds them as H200_FIT and H200_HOST_FLOOR_US)")
        print("H200_FIT = " + repr(fitted_constants(m)))
        print("H200_HOST_FLOOR_US = " + repr(m.host_floor_us))
        print()
    holdouts = {}
    if not args.no_holdout:
        holdouts = {"alternate sizes": holdout_alternate_sizes(rows, m),
                    "other GPU count": holdout_other_gpu_count(rows, m)}
    command = "python -m realgpu.calibration " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(m, rows, command, holdouts, nccl_tests=nccl_tests)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

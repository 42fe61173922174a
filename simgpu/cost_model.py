"""Predicted GPU time of a collective: an alpha-beta model in the spirit of NCCL's tuning model.

    predict(machine("h200-nvlink4"), "all_reduce", nbytes, nranks) -> Prediction(time_us, algo, proto, ...)
    python -m simgpu.cost_model --measured bench-g2.json bench-g4.json [--machine h200-nvlink4]
                                [--fit] [--no-holdout] [--nccl-tests DIR] [--out FILE.md]

`nbytes` is the size nccl-tests prints for the call: the larger of one rank's send and receive
buffers (all_gather: the gathered output; reduce_scatter: the whole input; all_to_all: the whole
buffer; scatter/gather: the root's whole list; all_reduce, broadcast, reduce, send/recv: the buffer).

The model (docs/cost-model.md says more):
- ring collectives (all_reduce, all_gather, reduce_scatter, broadcast, reduce), for each protocol
  p in LL, LL128, Simple:
      t_p = base_p + hops * hop_p + wire_p (+ min(fill_fraction * wire_p, hops * fill_cap) for Simple)
      wire_p = (busbytes + passes_c * nbytes / n) / bw_p
  busbytes = nbytes x nccl-tests' busbw factor (what one rank sends over its link); hops = the
  ring's steps (all_reduce 2(n-1), the others n-1); bw_p = the ring's bus bandwidth for Simple,
  0.92 of it for LL128, half of it capped at ll_max_bw for LL (NCCL's fractions); passes_c: extra
  passes over one rank's own chunk (local copy / reduction the ring does not hide), per collective;
  the fill term: Simple's chunked pipeline filling up. all_reduce may also use NCCL's tree (its
  fractions, uncalibrated). The fastest algorithm/protocol wins, as NCCL's tuner picks.
- point-to-point collectives (all_to_all, scatter, gather, send/recv): one transfer,
      t = p2p_latency + (busbytes + passes_c * nbytes / n) / p2p_bw.
- every call adds call_overhead (torch.distributed's GPU-side work around the NCCL kernel).
That is the GPU time (what a CUDA-graph replay measures). `mode="eager"` predicts what back-to-back
eager launches measure: max(host launch floor, GPU time), the floor being the host's time to
issue one call (measured per collective and rank count below 64 KB, where the GPU waits on the host).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

PROTOCOLS = ("LL", "LL128", "Simple")
RING_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
P2P_COLLECTIVES = ("all_to_all", "scatter", "gather", "sendrecv")
COLLECTIVES = RING_COLLECTIVES + P2P_COLLECTIVES
MAIN_COLLECTIVES = RING_COLLECTIVES  # the five the error target is set for
SCORED_MIN_BYTES = 64 * 1024         # the error figures count sizes from here up
ERROR_DEFINITION = "geometric-mean relative error = exp(mean(log(1 + |pred - meas| / meas))) - 1"

# what the simulator records (comm_log) -> the modelled collective
ALIASES = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
           "all_to_all_single": "all_to_all", "all_reduce_coalesced": "all_reduce", "barrier": "all_reduce",
           "send": "sendrecv", "recv": "sendrecv", "alltoall": "all_to_all"}


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x factor."""
    c = ALIASES.get(collective, collective)
    if n <= 1:
        return 0.0 if c not in ("broadcast", "reduce", "sendrecv") else 1.0
    if c == "all_reduce":
        return 2 * (n - 1) / n
    if c in ("all_gather", "reduce_scatter", "all_to_all", "scatter", "gather"):
        return (n - 1) / n
    if c in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise KeyError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")


def ring_hops(collective: str, n: int) -> int:
    """Steps a ring makes: all_reduce 2(n-1) (reduce-scatter then all-gather), the others n-1
    (broadcast and reduce: the depth of the pipelined chain)."""
    return 2 * (n - 1) if collective == "all_reduce" else n - 1


# ----------------------------------------------------------------------------- machines
@dataclass(frozen=True)
class Machine:
    """A box of GPUs and the model's parameters for it (times in microseconds, bandwidths in GB/s).

    gpus, interconnect, link_generation, links: what the box is (for the record and the ceiling:
    NVLink's per-link bandwidth x links, or a PCIe link's). The rest are the model's parameters;
    `calibrated` says whether they were fitted to measurements of such a box (and `source` where
    from) or are NCCL's published defaults.
    """

    name: str
    description: str
    gpus: int
    interconnect: str                  # "nvlink" or "pcie"
    link_generation: int               # NVLink 4, PCIe 5, ...
    links: int                         # NVLink links per GPU (1 for PCIe)
    link_bw_gbs: float                 # one direction, per GPU: the physical line rate
    bus_bw_gbs: float                  # ring, Simple protocol: bus bandwidth the ring sustains
    base_us: dict[str, float]          # ring base latency per protocol
    hop_us: dict[str, float]           # ring latency per step per protocol
    ll_max_bw_gbs: float = 141.0       # NCCL's cap on LL bandwidth (Hopper, one node)
    ll128_fraction: float = 0.92       # NCCL: LL128 moves 120 of every 128 bytes
    ll_fraction: float = 0.5           # NCCL: LL moves 4 of every 8 bytes
    passes: dict[str, float] = field(default_factory=dict)  # extra passes over one rank's chunk
    p2p_latency_us: float = 8.4        # point-to-point collectives' fixed latency
    p2p_bw_gbs: float = 0.0            # their bandwidth per GPU (0: the ring's bus_bw_gbs)
    call_overhead_us: float = 0.0      # torch.distributed's GPU-side time around the NCCL kernel
    tree: bool = True                  # all_reduce may use NCCL's tree (one node: a chain)
    tree_base_us: dict[str, float] = field(default_factory=lambda: {"LL": 6.8, "LL128": 14.0, "Simple": 8.4})
    tree_hop_us: dict[str, float] | None = None  # None: NCCL's tree/ring ratio x hop_us (0.6/0.6, 1.25/1.9, 4.0/3.4)
    fill_fraction: float = 0.0         # Simple: pipeline fill, as a fraction of the transfer time ...
    fill_cap_us: float = 0.0           # ... up to this much per ring step (chunks at their largest)
    host_floor_us: dict[str, dict[int, float]] = field(default_factory=dict)  # eager launch floor
    calibrated: bool = False
    source: str = ""

    def link_ceiling_gbs(self) -> float:
        """The most any busbw can be: the physical line rate of one GPU's links, one direction."""
        return self.link_bw_gbs

    def protocol_bw(self, proto: str) -> float:
        """Ring bus bandwidth of a protocol (GB/s)."""
        if proto == "Simple":
            return self.bus_bw_gbs
        if proto == "LL128":
            return self.bus_bw_gbs * self.ll128_fraction
        return min(self.ll_max_bw_gbs, self.bus_bw_gbs * self.ll_fraction)

    def floor_us(self, collective: str, n: int) -> float:
        """The host's time to issue one eager call (0 where unmeasured). Unmeasured rank counts take
        the nearest measured one (the smaller on a tie)."""
        table = self.host_floor_us.get(ALIASES.get(collective, collective)) or {}
        if not table:
            return 0.0
        known = sorted(table, key=lambda k: (abs(int(k) - n), int(k)))
        return float(table[known[0]])

    def with_params(self, **changes: Any) -> "Machine":
        return dataclasses.replace(self, **changes)

    def summary(self) -> str:
        kind = f"NVLink{self.link_generation} x{self.links}" if self.interconnect == "nvlink" else \
            f"PCIe Gen{self.link_generation}"
        state = "calibrated" if self.calibrated else "UNCALIBRATED (NCCL's published defaults)"
        return f"{self.name}: {self.description}; {kind}, ring bus bandwidth {self.bus_bw_gbs:.0f} GB/s; {state}"


# h200-nvlink4. Fixed at NCCL 2.28's own model (src/graph/tuning.cc, topo.h), whose tuning table on an H200
# box (benchmarks/results/h200-2026-11-22/investigation/inv-debug-nt.txt) has ring all_reduce LL/LL128/Simple
# at 10.2/25.4/28.8 us on 4 GPUs: base_us 6.6/14.0/8.4 and hop_us 0.6/1.9/3.4 (NVLink); LL128 at 0.92 of the
# bus bandwidth, LL at half of it, capped. bus_bw_gbs: NCCL's NVLink4 link model, 18 links x 20.6 GB/s
# (SM90_NVLINK_BW) = 370.8; NCCL's channel search settled on 24 x 15 = 360, but broadcast and reduce measure
# 360-369 GB/s busbw at 1 GiB, and refitting the rest with the bandwidth set from 371 to 387 GB/s leaves the
# error flat (4.9% -> 4.8% over the five main collectives), below it rises (5.3% at 360): it stays NCCL's.
# Fitted by calibrate() (H200_FIT) to benchmarks/results/h200-2026-11-22-trials5/ (NVIDIA H200 SXM, every pair
# NV18, NVLS off, torch 2.11.0+cu130, NCCL 2.28.9, driver 580.159.04; the 2-GPU rows from a 2x H200 box, the
# 4-GPU rows from a 4x H200 box): realgpu-bench, every size the median of 5 timed runs of 20 launches, eager
# rows from 64 KB up and CUDA-graph rows (8 B - 1 MiB) on 2 and 4 GPUs, all nine collectives. Reproduce with
#   D=benchmarks/results/h200-2026-11-22-trials5; python -m simgpu.cost_model --fit --no-holdout \
#       --measured $D/bench-g2.json $D/bench-g4.json $D/bench-g2-graph.json $D/bench-g4-graph.json
# (tests/test_cost_model.py checks that it does). H200_HOST_FLOOR_US: the median eager time below 64 KB per
# collective and GPU count, measured from the same files (each GPU count on its own box), never fitted.
H200_FIXED = {"bus_bw_gbs": 370.8, "hop_us": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}}
H200_FIT = {
    "ll_max_bw_gbs": 159.217,     # LL's bandwidth cap (NCCL's Hopper default: 141)
    "call_overhead_us": 3.22,     # torch.distributed's GPU-side time per call (graph, 8 B all_reduce on 4 GPUs:
                                  # torch 13.4 us, nccl-tests one process per GPU 8.0 us)
    "p2p_latency_us": 8.744,      # all_to_all / scatter / gather / send-recv: fixed latency
    "p2p_bw_gbs": 351.426,        # ... and bandwidth per GPU
    "fill_fraction": 0.072,       # Simple protocol: pipeline fill, as a share of the transfer time ...
    "fill_cap_us": 4.808,         # ... capped at this much per ring step
    "passes": {                   # extra passes over one rank's chunk (nbytes / n) at the link's rate
        "all_reduce": 0.37, "all_gather": 0.465, "reduce_scatter": 0.481, "broadcast": 0.0, "reduce": 0.0,
        "all_to_all": 0.319, "scatter": 0.139, "gather": 0.0, "sendrecv": 0.753},
}
H200_HOST_FLOOR_US: dict[str, dict[int, float]] = {
    "all_gather": {2: 30.3, 4: 47.5}, "all_reduce": {2: 39.6, 4: 49.8}, "all_to_all": {2: 34.1, 4: 65.0},
    "broadcast": {2: 24.0, 4: 46.7}, "gather": {2: 64.5, 4: 39.3}, "reduce": {2: 30.6, 4: 47.1},
    "reduce_scatter": {2: 39.8, 4: 46.9}, "scatter": {2: 49.4, 4: 58.7}, "sendrecv": {2: 79.6, 4: 90.2}}

NCCL_BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
NCCL_NVLINK_HOP_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
NCCL_PCI_HOP_US = {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}


def _h200() -> Machine:
    return Machine(
        name="h200-nvlink4", description="NVIDIA H200 SXM, up to 8 per node through NVSwitch, NVLS off",
        gpus=8, interconnect="nvlink", link_generation=4, links=18, link_bw_gbs=450.0,
        base_us=dict(NCCL_BASE_US), calibrated=True, host_floor_us=H200_HOST_FLOOR_US,
        source="benchmarks/results/h200-2026-11-22-trials5 (2x and 4x H200, medians of 5 runs, NCCL 2.28.9, "
               "torch 2.11.0+cu130)",
        **{k: (dict(v) if isinstance(v, dict) else v) for k, v in {**H200_FIXED, **H200_FIT}.items()})


def _h100_nccl_defaults() -> Machine:
    # NCCL's defaults for 8 H100 SXM on NVSwitch, NVLS off: 18 NVLink4 links x 20.6 GB/s (NCCL's
    # SM90_NVLINK_BW) -> a ring bus bandwidth of 370.8 GB/s; NCCL's latencies. Not fitted to anything, and
    # without torch's per-call overhead (about 3 us on the measured H200 box).
    return Machine(
        name="h100-nvlink4-nccl-defaults", description="NVIDIA H100 SXM x8 on NVSwitch, NVLS off (NCCL defaults)",
        gpus=8, interconnect="nvlink", link_generation=4, links=18, link_bw_gbs=450.0, bus_bw_gbs=370.8,
        base_us=dict(NCCL_BASE_US), hop_us=dict(NCCL_NVLINK_HOP_US), ll_max_bw_gbs=141.0,
        source="NCCL 2.28 src/graph/tuning.cc defaults; uncalibrated")


def _pcie_nccl_defaults() -> Machine:
    # A PCIe Gen4 x16 box (e.g. 4-8 GPUs under PCIe switches, no NVLink): NCCL's PCI latencies and its
    # PCIe bandwidth model (topo.cc: 16 GT/s x 16 lanes -> 24 GB/s per direction). Not fitted to anything.
    return Machine(
        name="pcie4-nccl-defaults", description="GPUs on PCIe Gen4 x16, no NVLink (NCCL defaults)",
        gpus=8, interconnect="pcie", link_generation=4, links=1, link_bw_gbs=32.0, bus_bw_gbs=24.0,
        base_us=dict(NCCL_BASE_US), hop_us=dict(NCCL_PCI_HOP_US), ll_max_bw_gbs=141.0,
        tree_hop_us={"LL": 1.0, "LL128": 1.9, "Simple": 4.0},  # NCCL's PCI tree latencies
        source="NCCL 2.28 src/graph/tuning.cc defaults (PCI hardware latencies); uncalibrated")


def presets() -> dict[str, Machine]:
    """Every named machine: the calibrated one and the uncalibrated NCCL-default ones."""
    return {m.name: m for m in (_h200(), _h100_nccl_defaults(), _pcie_nccl_defaults())}


class UnknownMachine(KeyError):
    def __str__(self) -> str:  # one line, naming the presets
        return str(self.args[0])


def machine(name: str) -> Machine:
    """The preset called `name`; UnknownMachine (one line naming the presets) otherwise."""
    known = presets()
    if name not in known:
        raise UnknownMachine(f"unknown machine preset {name!r}; known presets: {', '.join(known)}")
    return known[name]


# ----------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class Prediction:
    time_us: float       # what the mode asked for (GPU time, or eager: max(floor, GPU time))
    gpu_us: float        # the GPU time
    algo: str            # ring | tree | p2p | local
    proto: str           # LL | LL128 | Simple
    floor_us: float = 0.0

    @property
    def limited_by(self) -> str:
        return "host" if self.floor_us > self.gpu_us else "gpu"


_CANDIDATES = tuple([("ring", p) for p in PROTOCOLS] + [("tree", p) for p in PROTOCOLS]
                    + [("p2p", "Simple"), ("local", "Simple")])
_TREE_FRACTION = {"LL": 0.92 / 3.8, "LL128": 0.92 * 7 / 9, "Simple": 0.92}
_TREE_HOP_RATIO = {"LL": 0.6 / 0.6, "LL128": 1.25 / 1.9, "Simple": 4.0 / 3.4}  # NCCL's NVLink tree/ring


def candidate_times(m: Machine, collectives: Sequence[str], nbytes: Any, n: Any, fill: bool = True) -> Any:
    """GPU time (us) of every way NCCL could run each call: an array (calls x _CANDIDATES), inf where
    a way does not apply. The one place the model's arithmetic lives (numpy, so calibration is fast).
    fill=False leaves out Simple's pipeline fill: the times NCCL's tuner compares (see chosen)."""
    import numpy as np

    names = [ALIASES.get(c, c) for c in collectives]
    unknown = sorted({c for c in names if c not in COLLECTIVES})
    if unknown:
        raise KeyError(f"unknown collective {unknown[0]!r}; known: {', '.join(COLLECTIVES)}")
    size = np.asarray(nbytes, dtype=float).reshape(-1)
    ranks = np.asarray(n, dtype=float).reshape(-1) * np.ones_like(size)
    multi = ranks > 1
    safe_n = np.maximum(ranks, 2.0)
    is_ar = np.array([c == "all_reduce" for c in names])
    is_ring = np.array([c in RING_COLLECTIVES for c in names])
    factor = np.where(is_ar, 2 * (safe_n - 1) / safe_n,
                      np.where(np.array([c in ("broadcast", "reduce", "sendrecv") for c in names]), 1.0,
                               (safe_n - 1) / safe_n))
    passes = np.array([m.passes.get(c, 0.0) for c in names])
    moved = size * factor + passes * size / safe_n          # bytes through the bottleneck link
    hops = np.where(is_ar, 2 * (safe_n - 1), safe_n - 1)
    out = np.full((size.size, len(_CANDIDATES)), np.inf)
    tree_hop = m.tree_hop_us or {p: m.hop_us[p] * _TREE_HOP_RATIO[p] for p in PROTOCOLS}
    for j, p in enumerate(PROTOCOLS):
        wire = moved / (m.protocol_bw(p) * 1e3)
        t = m.base_us[p] + hops * m.hop_us[p] + wire
        if p == "Simple" and fill:  # chunked pipeline: filling it costs a share of the transfer, up to a cap
            t = t + np.minimum(m.fill_fraction * wire, hops * m.fill_cap_us)
        out[:, j] = np.where(is_ring & multi, t, np.inf)
        if m.tree:
            bw = m.bus_bw_gbs * _TREE_FRACTION[p]
            if p == "LL":
                bw = min(bw, m.ll_max_bw_gbs)
            tt = m.tree_base_us[p] + 2 * (safe_n - 1) * tree_hop[p] + (2 * size + passes * size / safe_n) / (bw * 1e3)
            out[:, 3 + j] = np.where(is_ar & multi, tt, np.inf)
    p2p_bw = m.p2p_bw_gbs or m.bus_bw_gbs
    out[:, 6] = np.where(~is_ring & multi, m.p2p_latency_us + moved / (p2p_bw * 1e3), np.inf)
    out[:, 7] = np.where(multi, np.inf, 0.0)
    return out + m.call_overhead_us


def chosen(m: Machine, collectives: Sequence[str], nbytes: Any, n: Any) -> tuple[Any, Any]:
    """(GPU time in us, index into _CANDIDATES) of the way NCCL runs each call. NCCL's tuner picks by its
    own latency/bandwidth model, which knows nothing of the Simple protocol's pipeline fill; so the
    choice is made without it, and the time is then the chosen way's whole time. (Choosing on the whole
    times instead would keep LL128 up to ~100 MB on 4 GPUs, where NCCL switches to Simple near 10 MB.)
    Sizes only ever move a call to a way with more bandwidth, so the time still never falls with size."""
    import numpy as np

    full = candidate_times(m, collectives, nbytes, n)
    pick = np.argmin(candidate_times(m, collectives, nbytes, n, fill=False), axis=1)
    return full[np.arange(pick.size), pick], pick


def candidates(m: Machine, collective: str, nbytes: float, n: int) -> list[tuple[float, str, str]]:
    """(GPU time in us, algorithm, protocol) of every way NCCL could run one call, fastest first."""
    times = candidate_times(m, [collective], [nbytes], [n])[0]
    return sorted((float(t), a, p) for t, (a, p) in zip(times, _CANDIDATES) if math.isfinite(t))


def predict(m: Machine, collective: str, nbytes: float, n: int, mode: str = "gpu") -> Prediction:
    """Predicted time of one call: mode "gpu" (GPU time) or "eager" (max(host floor, GPU time))."""
    times, pick = chosen(m, [collective], [nbytes], [n])
    t, (algo, proto) = float(times[0]), _CANDIDATES[int(pick[0])]
    if mode == "gpu" or mode.startswith("graph"):
        return Prediction(t, t, algo, proto)
    if mode == "eager":
        floor = m.floor_us(collective, n)
        return Prediction(max(t, floor), t, algo, proto, floor)
    raise ValueError(f"mode {mode!r}: expected gpu, graph or eager")


def predict_us(m: Machine, collective: str, nbytes: float, n: int, mode: str = "gpu") -> float:
    return predict(m, collective, nbytes, n, mode).time_us


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
    p = argparse.ArgumentParser(prog="python -m simgpu.cost_model",
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
        print(f"simgpu.cost_model: {exc}", file=sys.stderr)
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
    command = "python -m simgpu.cost_model " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(m, rows, command, holdouts, nccl_tests=nccl_tests)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

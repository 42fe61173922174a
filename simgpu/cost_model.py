"""Predicted GPU time of a collective: an alpha-beta model in the spirit of NCCL's tuning model.

    predict(machine("h200-nvlink4"), "all_reduce", nbytes, nranks) -> Prediction(time_us, algo, proto, ...)

The runtime model only; fitting it to measurements and the predicted-vs-measured report are
realgpu/calibration.py (`python -m realgpu.calibration`).

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

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from simgpu.collective_facts import ALIASES, PEER_TO_PEER, RING, bus_factors, canonical

PROTOCOLS = ("LL", "LL128", "Simple")
RING_COLLECTIVES = RING
P2P_COLLECTIVES = PEER_TO_PEER
MAIN_COLLECTIVES = RING_COLLECTIVES  # the five the error target is set for
SCORED_MIN_BYTES = 64 * 1024         # the error figures count sizes from here up
ERROR_DEFINITION = "geometric-mean relative error = exp(mean(log(1 + |pred - meas| / meas))) - 1"


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

    names = [canonical(c) for c in collectives]
    size = np.asarray(nbytes, dtype=float).reshape(-1)
    ranks = np.asarray(n, dtype=float).reshape(-1) * np.ones_like(size)
    multi = ranks > 1
    safe_n = np.maximum(ranks, 2.0)
    is_ar = np.array([c == "all_reduce" for c in names])
    is_ring = np.array([c in RING_COLLECTIVES for c in names])
    factor = bus_factors(names, safe_n)
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

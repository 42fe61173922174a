"""Support tables: what each backend must accept, and the error it must raise for the rest.

torch's ProcessGroupNCCL/ProcessGroupGloo sources and NCCL's documentation are the source; entries marked [run] were settled by runs of this suite
(where a run disagreed with the page, the run won); [nccl-run] marks what the first GPU run (4x H200,
torch 2.11.0+cu130, NCCL 2.28.9) and its probes settled: conformance/results/nccl-calibration.md has
each rule with its evidence. A backend with no table here is probed: the suite discovers per
combination whether it is supported (see conformance/driver.py). A registered backend may claim a table
(`--backend-profile=nccl|gloo`, or `hold_to` from its module with a table name or a Profile object): it is
then held to it, and the confirmed defects of the table's `base` backend (conformance/findings.py) are
reported as that base's findings, not as the registered backend's failures.

`size` is the number of ranks in the case's group (None: a group of several ranks). Groups of one
rank are where ProcessGroupNCCL skips most of its checks.
"""
from __future__ import annotations

from dataclasses import dataclass

from conformance.dtypes import DTYPES, DType
from conformance.spec import Reject

# torch's Python layer hands complex tensors to these as real views (torch.view_as_real);
# the others pass the complex tensor to the backend itself.
REAL_VIEW_COLLECTIVES = frozenset({
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single", "scatter",
    "all_to_all", "all_to_all_single", "send_recv", "isend_irecv", "batch_isend_irecv",
})
# torch before 2.9 hands broadcast's complex tensor to the backend as is. Evidence: tox env torch26,
# torch 2.6.0+cu124: cell broadcast-complex64 on sim raised "TypeError: Input tensor data type is not
# supported for NCCL process group: ComplexFloat", and 2.6.0's distributed_c10d.broadcast has no
# torch.view_as_real while 2.9.1's has (conformance/results/tox-matrix.md, "torch 2.6"). 2.7 and 2.8
# were not checked; the boundary is the first version seen with the real view.
RAW_COMPLEX_BEFORE = {"broadcast": (2, 9)}


def _passes_real_view(collective: str) -> bool:
    """Whether the installed torch hands this collective's complex tensors to the backend as real views."""
    if collective not in REAL_VIEW_COLLECTIVES:
        return False
    since = RAW_COMPLEX_BEFORE.get(collective)
    if since is None:
        return True
    import torch

    from conformance.version_guard import release

    return release(torch.__version__)[:2] >= since


COMPLEX_OPS = frozenset({"sum", "avg", "premul_sum"})  # torch's supports_complex(): the rest raise ValueError
P2P_COLLECTIVES = frozenset({"send_recv", "isend_irecv", "batch_isend_irecv"})
FP8 = ("float8_e4m3fn", "float8_e5m2")
# [nccl-run] ProcessGroupNCCL runs these through torch::cuda::nccl's helpers, whose dtype error is
# RuntimeError "Unconvertible NCCL type Short" instead of the TypeError of the others.
UNCONVERTIBLE_COLLECTIVES = frozenset({"gather", "scatter", "all_to_all", "all_to_all_single"})
# [nccl-run] On a group of one rank these skip NCCL: reduce_scatter* copy the input (no dtype or
# reduce-op check; reduce_scatter_tensor no layout check either), scatter copies locally (no dtype
# or layout check).
REDUCE_SCATTERS = frozenset({"reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"})
PREMUL_DTYPES = ("float16", "float32", "float64", "bfloat16", "complex64")


@dataclass(frozen=True)
class Profile:
    """A backend's support table. `flavor` picks the oracle's NaN and rounding rules; `base` names the backend
    whose confirmed defects (conformance/findings.py) a backend held to this table inherits: a wrapper of
    gloo claims gloo's table and gloo's known defects stay gloo's (None: no findings apply)."""

    name: str
    flavor: str
    dtypes: tuple[str, ...]     # dtypes the suite draws against this backend (claimed and rejected ones)
    description: str
    recv_any_source: bool = True   # recv(src=None); ProcessGroupNCCL has no recvAnysource
    # How a receive finds its message among several in flight from one peer: "tag" (torch's contract:
    # the send with the receive's tag; gloo) or "posting order" (ProcessGroupNCCL ignores tags; NCCL
    # matches the k-th receive from a peer with that peer's k-th send to it). Backends without a table
    # are held to "tag".
    p2p_matching: str = "tag"
    base: str | None = None

    def reject(self, collective: str, dtype: str | None, op: str | None, layout: str,
               features: frozenset[str] = frozenset(), size: int | None = None,
               empty: bool = False) -> Reject | None:
        """The error this backend must raise for the combination, or None if it must work.

        size: ranks in the group (None: several); empty: every tensor of the call has zero elements.
        Where several rules apply, the backend may report any one of them (checks run in its own order).
        """
        found: list[Reject | None] = []
        if dtype is not None:
            found.append(self._dtype_rule(collective, DTYPES[dtype], size))
            if op is not None:
                found.append(_complex_op_rule(collective, dtype, op))
                found.append(self._op_rule(collective, DTYPES[dtype], op, size, empty))
        if layout != "contiguous":
            found.append(self._layout_rule(collective, layout, size))
        found.extend(self._feature_rule(collective, feature) for feature in sorted(features))
        return Reject.any_of([r for r in found if r is not None])

    def _dtype_rule(self, collective: str, dtype: DType, size: int | None = None) -> Reject | None:
        raise NotImplementedError

    def _op_rule(self, collective: str, dtype: DType, op: str, size: int | None = None,
                 empty: bool = False) -> Reject | None:
        raise NotImplementedError

    def _layout_rule(self, collective: str, layout: str, size: int | None = None) -> Reject | None:
        raise NotImplementedError

    def _feature_rule(self, collective: str, feature: str) -> Reject | None:
        raise NotImplementedError


def _complex_op_rule(collective: str, dtype: str | None, op: str) -> Reject | None:
    if dtype == "complex64" and collective in REAL_VIEW_COLLECTIVES and op not in COMPLEX_OPS:
        return Reject(("ValueError",), r"does not support .* on complex tensors",
                      "torch rejects this reduce op on complex tensors")
    return None


class NcclProfile(Profile):
    """NCCL 2.28 through torch 2.11 (from torch's and NCCL's sources, corrected by the GPU run: [nccl-run]);
    the simulator is held to it too."""

    def _dtype_rule(self, collective: str, dtype: DType, size: int | None = None) -> Reject | None:
        if size == 1 and (collective in REDUCE_SCATTERS or collective == "scatter"):
            return None  # [nccl-run] int16/uint32/complex64 copied through on one rank
        unsupported = dtype.name in ("int16", "uint16", "uint32", "uint64")
        # [nccl-run] ProcessGroupNCCL::reduce (C++) reduces complex tensors as real views itself
        unsupported |= dtype.kind == "complex" and not _passes_real_view(collective) and collective != "reduce"
        if not unsupported:
            return None
        if collective in UNCONVERTIBLE_COLLECTIVES:
            return Reject(("RuntimeError",), r"Unconvertible NCCL type",
                          "[nccl-run] dtype not in NCCL's type map (torch::cuda::nccl)")
        return Reject(("TypeError",), r"data type is not supported|not supported for NCCL",
                      "dtype not in NCCL's type map")

    def _op_rule(self, collective: str, dtype: DType, op: str, size: int | None = None,
                 empty: bool = False) -> Reject | None:
        if size == 1 and collective in REDUCE_SCATTERS:
            return None  # [nccl-run] no reduce-op check on one rank: the output is the input
        if collective == "reduce" and dtype.kind == "complex" and op not in COMPLEX_OPS:
            return Reject(("RuntimeError",), r"reduce does not support.{0,3}on complex tensors",
                          "[nccl-run] ProcessGroupNCCL::reduce takes complex SUM/AVG/PREMUL_SUM only")
        if op in ("band", "bor", "bxor"):
            return Reject(("ValueError",), rf"Cannot use ReduceOp\.{op.upper()} with NCCL", "NCCL has no bitwise ops")
        if op == "avg" and dtype.kind == "bool":
            return Reject(("TypeError",), r"AVG.*bool|bool.*AVG", "NCCL rejects AVG on bool")
        if op == "premul_sum" and dtype.name not in PREMUL_DTYPES:
            # [nccl-run] "PreMulSum Data type must be half, float, bfloat16 or double"
            return Reject(("TypeError",), r"PREMUL_SUM|PreMulSum|premul", "PREMUL_SUM needs a floating dtype")
        if size == 1 and op == "avg" and dtype.name in FP8 and collective in ("all_reduce", "reduce") and not empty:
            # [nccl-run] zero elements: NCCL returns before it looks at the op (x2 run: reduce of (4, 0) went through)
            return Reject(("DistBackendError",), r"invalid argument",
                          "[nccl-run] NCCL 2.28 refuses fp8 AVG on a communicator of one rank")
        return None

    def _layout_rule(self, collective: str, layout: str, size: int | None = None) -> Reject | None:
        if collective in P2P_COLLECTIVES:
            if layout == "transposed":
                return None  # [nccl-run] dense: accepted (a warning), memory order on both ends
            return Reject(("ValueError",), r"Tensors for P2P must be non-overlapping and dense",
                          "[nccl-run] point-to-point needs dense tensors")
        if collective == "scatter" and (size == 1 or layout == "transposed"):
            return None  # [nccl-run] one rank copies locally; a dense (transposed) tensor moves right
        # reduce_scatter_tensor and strided scatter: NCCL does not check, and scrambles (findings);
        # the table keeps the check so that code green on the simulator is right on NCCL.
        return Reject(("ValueError",), r"Tensors must be contiguous", "NCCL needs contiguous tensors")

    def _feature_rule(self, collective: str, feature: str) -> Reject | None:
        return None  # uneven sizes and stacked outputs are all accepted by NCCL


class GlooProfile(Profile):
    """gloo as shipped in torch 2.13 (from torch's gloo sources; [run] = settled by runs of this suite)."""

    def _dtype_rule(self, collective: str, dtype: DType, size: int | None = None) -> Reject | None:
        if collective in P2P_COLLECTIVES:
            return None  # [run] point-to-point moves bytes: every dtype goes through
        if dtype.name in ("int16", "uint16", "uint32", "uint64") or dtype.name in FP8:
            return Reject(("RuntimeError",), r"Invalid scalar type|not supported|Unsupported",
                          "dtype not in gloo's type map")
        if dtype.kind == "complex" and collective == "gather":
            return Reject(("RuntimeError",), r"Invalid scalar type", "[run] gloo gather has no complex type")
        return None

    def _op_rule(self, collective: str, dtype: DType, op: str, size: int | None = None,
                 empty: bool = False) -> Reject | None:
        if op == "premul_sum":
            return Reject(("RuntimeError", "ValueError"), r"PREMUL_SUM", "gloo has no PREMUL_SUM")
        if dtype.kind == "complex" and collective not in REAL_VIEW_COLLECTIVES and op not in ("sum", "avg"):
            return Reject(("RuntimeError",), r"does not support.{0,3}on complex",
                          "[run] gloo reduces raw complex tensors with SUM/AVG only")
        if op in ("band", "bor", "bxor") and not dtype.is_integral:
            return Reject(("RuntimeError",), r"non-integral", "gloo bitwise ops need integer dtypes")
        if op == "avg" and dtype.is_integral:
            return Reject(("RuntimeError",), r"can't be cast|AVG", "gloo AVG divides in floating point")
        return None

    def _layout_rule(self, collective: str, layout: str, size: int | None = None) -> Reject | None:
        if collective in P2P_COLLECTIVES:
            return Reject(("RuntimeError",), r"has to be contiguous", "[run] gloo send/recv need contiguous tensors")
        if collective == "all_to_all_single":
            return Reject(("ValueError",), r"Tensors must be contiguous", "[run] checked by torch for gloo too")
        return None

    def _feature_rule(self, collective: str, feature: str) -> Reject | None:
        if feature == "uneven" and collective in ("all_gather", "all_to_all"):
            return Reject(("RuntimeError",), r"invalid tensor size", "gloo needs equal sizes")
        if feature == "stacked_output":
            return Reject(("RuntimeError", "ValueError"), r".", "gloo needs the dim-0 concatenated shape")
        return None


_ALL = tuple(DTYPES)
NCCL = NcclProfile("nccl", "nccl", _ALL, "NCCL 2.28 via torch 2.11", recv_any_source=False,
                   p2p_matching="posting order", base="nccl")
GLOO = GlooProfile("gloo", "gloo", _ALL, "gloo in torch 2.13", base="gloo")

TABLES = {"nccl": NCCL, "gloo": GLOO}
BUILTIN = {"sim": NCCL, "nccl": NCCL, "gloo": GLOO}  # the backends the suite knows, and the table each has
# Registered backends that declared the table they must meet (hold_to), by backend name.
_HELD: dict[str, Profile] = {}


def table(claim: str | Profile) -> Profile:
    """A claimed table: a built-in one by name ("nccl", "gloo"), or a Profile object as it is."""
    if isinstance(claim, Profile):
        return claim
    if claim not in TABLES:
        raise ValueError(f"no table {claim!r}; choose one of {', '.join(sorted(TABLES))}, or pass a "
                         "conformance.backends.Profile object")
    return TABLES[claim]


def hold_to(backend: str, claim: str | Profile) -> None:
    """Hold a registered backend to a table instead of probing it: called by the module that registers it
    (--backend-module), e.g. a backend that wraps NCCL, gloo or the simulator. `claim` is a built-in
    table's name or a Profile object (your own table, e.g. a GlooProfile subclass that refuses more)."""
    _HELD[backend.lower()] = table(claim)


def declared(backend: str) -> Profile | None:
    """The table a registered backend's module claimed with hold_to, if any."""
    return _HELD.get(backend.lower())


def profile_for(backend: str, claimed: str | None = None) -> Profile | None:
    """The table a backend is held to: sim, nccl and gloo their own (sim is held to NCCL's); a registered
    backend the one claimed on the command line (--backend-profile) or by its module (hold_to); otherwise
    none (probed). Raises ValueError where the claim cannot stand."""
    if backend in BUILTIN:
        if claimed is not None:
            raise ValueError(f"--backend-profile is for a registered backend; --backend={backend} is held to "
                             f"its own table ({BUILTIN[backend].description})")
        return BUILTIN[backend]
    from_module = declared(backend)
    if claimed is None:
        return from_module
    chosen = table(claimed)
    if from_module is not None and from_module is not chosen:
        raise ValueError(f"--backend-profile={claimed} contradicts the table {from_module.name!r} that the "
                         f"backend module declared for {backend!r} (hold_to); give one of the two")
    return chosen


def findings_backend(backend: str, profile: Profile | None) -> str:
    """Whose confirmed defects excuse this backend's failures: a built-in backend's own, a registered
    backend's claimed base (a gloo wrapper fails where gloo does, and those stay gloo's findings)."""
    if backend in BUILTIN or profile is None or profile.base is None:
        return backend
    return profile.base

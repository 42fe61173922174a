"""The suite catches each deliberately broken backend of tests/broken_backends.py and tests/broken_gloo.py
with the default (ci) profile on three hypothesis seeds (seed 0 by default, seeds 1 and 2 with --full),
every failing example it prints holds the input class that backend's defect needs (so the catch comes
from that class, not from some other difference), and the faithful pass-through of the same family
(passthrough: the simulator; passgloo: gloo wrapped in Python) passes the same cells on the same seeds:
the catch is differential, no false alarm.

Each test runs `python -m pytest conformance/test_collectives.py --backend=<broken> ...` in a subprocess
from the repository root (pytest-xdist runs them side by side).
The gloo runs check the findings side: real gloo's SUM on bool leaves byte 2, which the suite reports as the
registered finding gloo-bool-sum-bytes (XFAIL), not as a pass; and a wrapper that claims gloo's table gets
gloo's findings as gloo's, not as its own failures.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.processes import REPO, child_env, run_bounded
from tests.tiers import first_then_full

SEEDS = (0, 1, 2)

# the cells each broken backend runs (exact ids) and the input class every failing case must show
LARGE_CELLS = ("all_reduce-float32-sum", "broadcast-int8", "all_gather_into_tensor-float16", "gather-bfloat16",
               "all_to_all_single-int32", "isend_irecv-float64")
ROUNDING_CELLS = ("all_reduce-float16-sum", "reduce-float16-sum", "reduce_scatter-float16-sum",
                  "reduce_scatter_tensor-float16-sum", "reduce_scatter_single-float16-sum")
EMPTY_CELLS = ("all_reduce-float32-sum", "broadcast-int32", "all_gather_into_tensor-float32",
               "reduce_scatter_tensor-float32-sum", "gather-int64", "scatter-uint8")
PRODUCT_CELLS = ("all_reduce-float16-product", "all_reduce-float32-product", "all_reduce-float64-product",
                 "reduce-bfloat16-product", "reduce-float32-product")
OFFSET_CELLS = ("broadcast-float32", "all_gather_into_tensor-int32", "reduce_scatter_tensor-float32-sum", "gather-int8",
                "all_to_all_single-float32", "isend_irecv-int32")
TAGGED_CELLS = ("isend_irecv-float32", "isend_irecv-int64", "batch_isend_irecv-float32", "batch_isend_irecv-int32")
CELLS = {
    "offsetblind": OFFSET_CELLS,
    "offsetspill": OFFSET_CELLS,
    "globalslots": ("all_gather-float32", "gather-int32", "scatter-float32", "all_gather_object", "gather_object",
                    "scatter_object_list"),
    "tagmatch": TAGGED_CELLS,
    "boolbytes": ("all_reduce-bool-sum", "reduce-bool-sum", "reduce_scatter-bool-sum", "reduce_scatter_tensor-bool-sum",
                  "reduce_scatter_single-bool-sum"),
    "tagblind": TAGGED_CELLS,
    "chunktail": LARGE_CELLS,
    "roundzero": ROUNDING_CELLS,
    "emptyrefusal": EMPTY_CELLS,
    "arrivalorder": ("gather_object", "gather-float32", "gather-int8"),
    "skipzero": ("barrier",),
    "logproduct": PRODUCT_CELLS,
}
# how each runs: its module, and the table it claims on the command line (the first six declare NCCL's
# in their module, conformance.backends.hold_to; tagblind is probed)
GLOO_WRAPPED = frozenset({"logproduct"})
CLAIMS_NCCL = frozenset({"chunktail", "roundzero", "emptyrefusal", "arrivalorder", "skipzero"})
CASE = re.compile(r"case: (?P<collective>\w+)\(world=(?P<world>\d+), group=(?P<group>None|\([\d, ]*\)), "
                  r"dtype=(?P<dtype>\w+), .*?offset=(?P<offset>\d+), .*params=(?P<params>\{.*\})\)\s*$", re.M)


def _offset_view(m: re.Match) -> bool:
    """A tensor at a storage offset: a drawn offset, or an in-place slot of a larger tensor."""
    return int(m["offset"]) > 0 or "'in_place': True" in m["params"]


def _shifted_group(m: re.Match) -> bool:
    """A subgroup whose global ranks are not 0..k-1 (group rank j != global rank j)."""
    if m["group"] == "None":
        return False
    ranks = sorted(ast.literal_eval(m["group"] if "," in m["group"] else m["group"][:-1] + ",)"))
    return ranks != list(range(len(ranks)))


def _several_tags(m: re.Match) -> bool:
    """Several messages per pair, with distinct tags, posted in different orders."""
    params = ast.literal_eval(m["params"])
    return len(params["tags"]) > 1 and params["send_order"] != params["recv_order"]


def _past_one_mib(m: re.Match) -> bool:
    """A large case: every rank's tensors past 1 MiB (conformance.strategies.large_numel)."""
    return ast.literal_eval(m["params"]).get("bytes_per_rank", 0) > 1 << 20


def _arrival(m: re.Match) -> bool:
    """The members reached gather / gather_object in a drawn order other than their ranks'."""
    return "arrival" in ast.literal_eval(m["params"])


CLASS: dict[str, Callable[[re.Match], bool]] = {
    "offsetblind": _offset_view,
    "offsetspill": _offset_view,
    "globalslots": _shifted_group,
    "tagmatch": _several_tags,
    "boolbytes": lambda m: m["dtype"] == "bool",
    "tagblind": _several_tags,
    "chunktail": _past_one_mib,
    "arrivalorder": _arrival,
    "roundzero": lambda m: m["dtype"] == "float16",
    "emptyrefusal": lambda m: True,  # its class shows in the failure (_FAILURE below), not in the case
    "skipzero": lambda m: True,
    "logproduct": lambda m: m["dtype"] in ("float16", "bfloat16", "float32", "float64"),
}
# what every failure line of these must say: the class that caught it
FAILURE = {
    "roundzero": r"rounded once in any order .* correctly rounded",  # full-mantissa values and ties, no tolerance
    "emptyrefusal": r"^should-work: RuntimeError: emptyrefusal",     # a claimed table: the refusal is a failure
    "skipzero": r"before member 0 arrived",                          # rank 0 arrived last
    "logproduct": r"rounded once in any order|allowed error",         # rounding only
}


def run_suite(tmp: Path, name: str, seed: int, cells: tuple[str, ...], *args: str) -> tuple[int, str]:
    """`pytest` on these cells of conformance/test_collectives.py with the ci profile, this seed and ARGS;
    its exit code and output."""
    proc = run_bounded(
        [sys.executable, "-m", "pytest", *(f"conformance/test_collectives.py::test_collective[{c}]" for c in cells),
         "-p", "no:cacheprovider", "-q",
         "--conformance-profile=ci", "--rank-timeout=30", f"--hypothesis-seed={seed}",
         "--report-dir", str(tmp / f"{name}-{seed}"), *args],
        300, cwd=REPO, env=child_env(HYPOTHESIS_STORAGE_DIRECTORY=str(tmp / "hypothesis")))
    return proc.returncode, proc.stdout + proc.stderr


def backend_args(backend: str) -> list[str]:
    """The options that run the suite against one of the broken backends or pass-throughs."""
    module = "tests.broken_gloo" if backend in GLOO_WRAPPED or backend == "passgloo" else "tests.broken_backends"
    args = [f"--backend={backend}", f"--backend-module={module}"]
    if backend in GLOO_WRAPPED or backend == "passgloo":
        args.append("--backend-profile=gloo")
    elif backend in CLAIMS_NCCL or backend == "passthrough":
        args.append("--backend-profile=nccl")
    return args


def failure_lines(text: str) -> list[str]:
    """The outcome line of every failing example the suite printed ("FAIL: ...", "should-work: ...")."""
    return [line.split("AssertionError: ", 1)[1] for line in text.splitlines() if "AssertionError: " in line]


@pytest.mark.parametrize("seed", first_then_full(SEEDS, [str(s) for s in SEEDS]))
@pytest.mark.parametrize("backend", sorted(CELLS))
def test_broken_backend_is_caught_by_its_input_class(tmp_path: Path, backend: str, seed: int) -> None:
    rc, text = run_suite(tmp_path, backend, seed, CELLS[backend], *backend_args(backend))
    assert rc == pytest.ExitCode.TESTS_FAILED, text[-4000:]
    assert ("FAIL: wrong result" in text) != (backend == "emptyrefusal"), text[-4000:]
    assert f"| backend {backend} |" in text  # the ranks really ran the broken backend
    cases = list(CASE.finditer(text))
    assert cases, text[-4000:]
    for m in cases:
        assert CLASS[backend](m), f"{backend} failed a case without its input class: {m.group(0)}"
    if backend in FAILURE:
        lines = failure_lines(text)
        assert lines, text[-4000:]
        for line in lines:
            assert re.search(FAILURE[backend], line), f"{backend} failed for another reason: {line}"
    if backend == "offsetspill":  # its views are right: only the sentinel around them can see the defect
        assert "wrote outside the view" in text, text[-4000:]


PASS_THROUGH = {  # the faithful pass-through of each family, over every cell of that family's broken backends
    "passthrough": tuple(sorted({c for b, cells in CELLS.items() if b not in GLOO_WRAPPED for c in cells})),
    "passgloo": tuple(sorted({c for b in GLOO_WRAPPED for c in CELLS[b]})),
}


@pytest.mark.parametrize("seed", first_then_full(SEEDS, [str(s) for s in SEEDS]))
@pytest.mark.parametrize("backend", sorted(PASS_THROUGH))
def test_faithful_pass_through_passes_the_same_cells(tmp_path: Path, backend: str, seed: int) -> None:
    rc, text = run_suite(tmp_path, backend, seed, PASS_THROUGH[backend], *backend_args(backend), "-rx")
    assert rc == pytest.ExitCode.OK, text[-6000:]
    assert f"backend {backend} (held to " in text, text[-3000:]  # the matrix of the backend that ran


@pytest.mark.full
def test_a_probed_backend_gets_away_with_refusals_a_claimed_table_catches(tmp_path: Path) -> None:
    """emptyrefusal without --backend-profile: probed, its refusals count as unsupported and the run passes
    (why a backend should claim its table; with one, the refusals fail: the test above)."""
    rc, text = run_suite(tmp_path, "emptyrefusal", 0, EMPTY_CELLS, "--backend=emptyrefusal",
                         "--backend-module=tests.broken_backends")
    assert rc == pytest.ExitCode.OK, text[-4000:]
    assert re.search(r"examples: .*unsupported [1-9]", text), text[-4000:]


def test_gloo_bool_sum_bytes_is_a_registered_finding(tmp_path: Path) -> None:
    rc, text = run_suite(tmp_path, "gloo", 0, ("reduce_scatter-bool-sum", "reduce-bool-sum"), "--backend=gloo", "-rx")
    assert rc == pytest.ExitCode.OK, text[-4000:]  # no unexplained failure
    assert "known finding gloo-bool-sum-bytes" in text, text[-4000:]  # caught, and excused only by the finding


def test_a_gloo_wrapper_gets_gloos_findings_as_gloos(tmp_path: Path) -> None:
    """passgloo claims gloo's table: where gloo itself is wrong (bool SUM bytes), the failure is gloo's
    registered finding, named as the claimed base's, and the run passes."""
    rc, text = run_suite(tmp_path, "passgloo", 0, ("reduce_scatter-bool-sum", "reduce-bool-sum"),
                         *backend_args("passgloo"), "-rx")
    assert rc == pytest.ExitCode.OK, text[-4000:]
    assert "known finding gloo-bool-sum-bytes of gloo (the claimed base)" in text, text[-4000:]

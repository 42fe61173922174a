"""A registered backend claims the support table it must meet (conformance/backends.py): by name on the
command line (--backend-profile), or from its module with hold_to, a built-in table or a Profile object
of its own; the claimed table's base decides whose confirmed defects excuse a failure (issue 32 item 3).
The runs against backends that claim tables are in tests/test_broken_backends.py.
"""
from __future__ import annotations

import dataclasses

import pytest

from conformance.backends import GLOO, NCCL, GlooProfile, findings_backend, hold_to, profile_for
from conformance.findings import known_finding
from conformance.spec import Cell, Reject


class MineProfile(GlooProfile):
    """The example of docs/conformance-suite.md: gloo's table, but no point-to-point on bool."""

    def _dtype_rule(self, collective, dtype, size=None):  # noqa: ANN001, ANN202 - as in the page
        if collective in ("send_recv", "isend_irecv") and dtype.name == "bool":
            return Reject(("RuntimeError",), r"bool", "mine sends no bool")
        return super()._dtype_rule(collective, dtype, size)


def test_builtin_backends_keep_their_own_tables_and_findings() -> None:
    assert profile_for("sim") is NCCL and profile_for("gloo") is GLOO and profile_for("nccl") is NCCL
    assert findings_backend("sim", NCCL) == "sim"  # the simulator is held to NCCL's table, not excused by its defects
    with pytest.raises(ValueError, match="--backend-profile is for a registered backend"):
        profile_for("gloo", "nccl")


def test_a_claim_on_the_command_line_holds_a_registered_backend_to_that_table() -> None:
    assert profile_for("claimed-by-flag") is None  # probed without a claim
    assert profile_for("claimed-by-flag", "gloo") is GLOO
    assert findings_backend("claimed-by-flag", GLOO) == "gloo"
    assert findings_backend("claimed-by-flag", None) == "claimed-by-flag"
    with pytest.raises(ValueError, match="no table 'mpi'"):
        profile_for("claimed-by-flag", "mpi")


def test_a_module_may_claim_a_table_object_of_its_own() -> None:
    mine = MineProfile("mine-object", "gloo", GLOO.dtypes, "mine 1.0", base="gloo")
    hold_to("Mine-Object", mine)
    assert profile_for("mine-object") is mine and findings_backend("mine-object", mine) == "gloo"
    refused = mine.reject("send_recv", "bool", None, "contiguous")
    assert refused is not None and refused.matches("RuntimeError", "bool is not sent")
    assert mine.reject("all_reduce", "bool", "sum", "contiguous") is None  # the rest is gloo's
    with pytest.raises(ValueError, match="contradicts the table 'mine-object'"):
        profile_for("mine-object", "gloo")


def test_the_claimed_base_s_findings_and_no_others_excuse_a_failure() -> None:
    """gloo's bool SUM bytes finding excuses a wrapper that claims gloo's table, not one that claims NCCL's
    or none, and not a failure of another kind."""
    cell = Cell("reduce", "bool", "sum")
    detail = "wrong result: rank 0: invalid bool: raw byte(s) [2]"
    assert known_finding(findings_backend("wrapper", GLOO), cell, "contiguous", "FAIL", detail, "2.13.0")
    assert not known_finding(findings_backend("wrapper", NCCL), cell, "contiguous", "FAIL", detail, "2.13.0")
    assert not known_finding(findings_backend("wrapper", None), cell, "contiguous", "FAIL", detail, "2.13.0")
    assert not known_finding(findings_backend("wrapper", GLOO), cell, "contiguous", "FAIL",
                             "wrong result: rank 0: 1 element(s) wrong", "2.13.0")
    no_base = dataclasses.replace(GLOO, base=None)
    assert findings_backend("wrapper", no_base) == "wrapper"

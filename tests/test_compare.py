"""conformance.compare on small synthetic capability reports: which cells differ, the agreement
figure, explanations (wildcards, pinned marks, stale ones), UNEXPLAINED cells and the exit code."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.compare import compare, main, marks


def rec(collective: str, dtype: str, op: str, layout: str, counts: dict[str, int],
        details: dict[str, str] | None = None) -> dict[str, Any]:
    return {"collective": collective, "dtype": dtype, "op": op, "layout": layout, "counts": counts,
            "details": details or {}}


SIM = [
    rec("all_reduce", "float32", "sum", "contiguous", {"pass": 4}),
    rec("all_reduce", "float32", "sum", "strided", {"rejected": 1}, {"rejected": "ValueError: Tensors must be contiguous"}),
    rec("all_reduce", "float8_e4m3fn", "sum", "contiguous", {"pass": 3}),
    rec("all_reduce", "float8_e5m2", "sum", "contiguous", {"pass": 3}),
    rec("all_reduce", "int16", "sum", "contiguous", {"rejected": 2}, {"rejected": "TypeError: not supported: Short"}),
    rec("broadcast", "bool", "-", "contiguous", {"pass": 2, "FAIL": 1}, {"FAIL": "wrong result: rank 1: 1 element"}),
    rec("barrier", "-", "-", "contiguous", {"pass": 4}),
]
NCCL = [
    rec("all_reduce", "float32", "sum", "contiguous", {"pass": 4}),
    rec("all_reduce", "float32", "sum", "strided", {"rejected": 2}, {"rejected": "ValueError: Tensors must be contiguous"}),
    rec("all_reduce", "float8_e4m3fn", "sum", "contiguous", {"rejected": 3}, {"rejected": "RuntimeError: fp8 needs sm90"}),
    rec("all_reduce", "float8_e5m2", "sum", "contiguous", {"rejected": 3}, {"rejected": "RuntimeError: fp8 needs sm90"}),
    rec("all_reduce", "int16", "sum", "contiguous", {"rejected": 2}, {"rejected": "RuntimeError: Invalid scalar type"}),
    rec("broadcast", "bool", "-", "contiguous", {"pass": 3}),
    rec("all_gather", "float32", "-", "contiguous", {"pass": 1}),
]
FP8 = {"cell": "all_reduce/float8_*/*/*", "sim": "ok", "nccl": "rej", "reason": "fp8 needs sm90; the test GPU is older"}


def test_marks_take_each_cells_worst_outcome_and_its_error() -> None:
    m = marks(SIM)
    assert m[("broadcast", "bool", "-", "contiguous")].mark == "FAIL"
    assert m[("broadcast", "bool", "-", "contiguous")].error.startswith("wrong result")
    assert m[("all_reduce", "int16", "sum", "contiguous")].error_type == "TypeError"
    assert m[("barrier", "-", "-", "contiguous")].mark == "ok" and m[("barrier", "-", "-", "contiguous")].error == ""


def test_differences_on_the_common_grid() -> None:
    result = compare(marks(SIM), marks(NCCL))
    assert result.common == 6 and result.agreeing == 2  # float32 contiguous ok/ok, strided rej/rej same type
    assert [d.key[1] for d in result.differences] == ["float8_e4m3fn", "float8_e5m2", "int16", "bool"]
    int16 = result.differences[2]
    assert (int16.left.mark, int16.right.mark) == ("rej", "rej")  # same mark, different error type
    assert (int16.left.error_type, int16.right.error_type) == ("TypeError", "RuntimeError")
    assert result.only_left == [("barrier", "-", "-", "contiguous")]
    assert result.only_right == [("all_gather", "float32", "-", "contiguous")]
    assert len(result.unexplained) == 4


def test_explanations_match_by_wildcard_and_pinned_marks() -> None:
    other_way = {"cell": "broadcast/bool/*/*", "sim": "ok", "nccl": "FAIL", "reason": "pinned the other way round"}
    stale = {"cell": "reduce/*/*/*", "reason": "nothing differs there any more"}
    result = compare(marks(SIM), marks(NCCL), [FP8, other_way, stale])
    reasons = {d.key[1]: d.reason for d in result.differences}
    assert reasons == {"float8_e4m3fn": FP8["reason"], "float8_e5m2": FP8["reason"], "int16": None, "bool": None}
    assert result.unused_explanations == [other_way, stale]


def write(path: Path, backend: str, records: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"metadata": {"backend": backend, "torch": "2.13.0", "date": "today"},
                                "cells": records}))
    return path


def test_command_writes_the_report_and_fails_on_unexplained(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sim, nccl = write(tmp_path / "sim.json", "sim", SIM), write(tmp_path / "nccl.json", "nccl", NCCL)
    explained = tmp_path / "explained.json"
    explained.write_text(json.dumps({"explanations": [FP8]}))
    out = tmp_path / "results" / "sim-vs-nccl.md"
    assert main([str(sim), str(nccl), "--explanations", str(explained), "--out", str(out)]) == 1
    text = out.read_text()
    assert "6 cells; agree 2 (33.3%), differ 4, of which UNEXPLAINED 2" in text
    assert "| all_reduce/int16/sum/contiguous | rej | rej | `TypeError: not supported: Short` | " \
           "`RuntimeError: Invalid scalar type` | **UNEXPLAINED** |" in text
    assert f"| {FP8['reason']} |" in text and "Only in nccl" in text and "- barrier/-/-/contiguous" in text
    assert "sim vs nccl: 6 common cells, 33.3% agree, 4 differ, 2 UNEXPLAINED" in capsys.readouterr().err

    everything = [FP8, {"cell": "all_reduce/int16/*/*", "reason": "error type: torch raises before the backend"},
                  {"cell": "broadcast/bool/-/contiguous", "sim": "FAIL", "reason": "sim defect, fix pending"}]
    explained.write_text(json.dumps({"explanations": everything}))
    assert main([str(sim), str(nccl), "--explanations", str(explained), "--out", str(out)]) == 0
    assert "UNEXPLAINED 0" in out.read_text()


def test_identical_reports_agree_fully(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a, b = write(tmp_path / "a.json", "sim", SIM), write(tmp_path / "b.json", "sim", SIM)
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr()
    assert "7 cells; agree 7 (100.0%), differ 0" in out.out and "sim (a.json) vs sim (b.json)" in out.err


@pytest.mark.parametrize("content,message", [
    ("not json", "is not a capability report"),
    ('{"explanations": [{"cell": "x/*"}]}', 'needs "cell" and "reason"'),
])
def test_bad_input_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    good = write(tmp_path / "good.json", "sim", SIM)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    args = [str(bad), str(good)] if "capability" in message else [str(good), str(good), "--explanations", str(bad)]
    with pytest.raises(SystemExit) as info:
        main(args)
    assert message in str(info.value) and "\n" not in str(info.value)

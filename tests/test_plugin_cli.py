"""The pytest plugin from the command line (conformance/plugin.py): bad options fail in one line, a wrong
backend is caught and reported, and a real gloo run writes the capability report.

Each scenario is a `python -m pytest conformance ...` subprocess of its test, run from the repository
root (rank processes import tests.wrong_backend from there).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.processes import REPO, child_env, run_bounded

WRONG_CELLS = ("all_reduce-float32-sum", "all_reduce-int32-sum")  # -k "[id]": not funcol.all_reduce-... too


def _scenarios(reports: Path) -> dict[str, list[str]]:
    common = ["--conformance-profile=ci", "--rank-timeout=30", "--hypothesis-seed=0"]  # reproducible draws
    return {
        "nosuch": ["--backend=nosuch"],
        "unregistered": ["--backend=wrongsum"],
        "nccl": ["--backend=nccl"],
        "bad_module": ["--backend-module=nonexistent.module"],
        "world9": ["--max-world-size", "9"],
        "profile_builtin": ["--backend=gloo", "--backend-profile=nccl"],
        "profile_conflict": ["--backend=offsetblind", "--backend-module=tests.broken_backends", "--backend-profile=gloo"],
        "wrongsum": ["--backend=wrongsum", "--backend-module=tests.wrong_backend",
                     "-k", " or ".join(f"[{cell}]" for cell in WRONG_CELLS), "--report-dir", str(reports / "wrongsum"), *common],
        "gloo": ["--backend=gloo", "-k", "[broadcast-float32] or barrier",
                 "--report-dir", str(reports / "gloo"), *common],
    }


def run_scenario(tmp: Path, name: str) -> tuple[int, str, str]:
    """`python -m pytest conformance` with the scenario's options (reports under tmp/reports); exit code,
    stdout, stderr."""
    args = _scenarios(tmp / "reports")[name]
    done = run_bounded([sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", *args],
                       180, cwd=REPO, env=child_env(HYPOTHESIS_STORAGE_DIRECTORY=str(tmp / "hypothesis")))
    return done.returncode, done.stdout, done.stderr


def _usage_error(tmp: Path, name: str) -> str:
    """The scenario ended as a pytest usage error: exit status 4, one ERROR line, no traceback."""
    rc, out, err = run_scenario(tmp, name)
    text = out + err
    assert rc == pytest.ExitCode.USAGE_ERROR, (rc, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
    errors = [line for line in text.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, text[-3000:]
    return errors[0]


def test_unknown_backend_is_one_line_listing_the_choices(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, "nosuch")
    assert "'nosuch'" in line
    choices = line.split("choose one of:", 1)[1]
    assert {"sim", "gloo", "nccl"} <= {c.strip() for c in choices.split(",")}


def test_unregistered_backend_points_at_backend_module(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, "unregistered")
    assert "'wrongsum'" in line and "--backend-module" in line


def test_nccl_without_gpus_says_it_needs_gpus(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, "nccl")
    assert "nccl" in line and "GPU" in line and "has 0" in line


def test_backend_module_that_does_not_import(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, "bad_module")
    assert "nonexistent.module" in line and "ModuleNotFoundError" in line


def test_backend_profile_on_a_builtin_backend_is_a_usage_error(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, "profile_builtin")
    assert "--backend-profile" in line and "--backend=gloo" in line


def test_backend_profile_that_contradicts_the_module_s_claim_is_a_usage_error(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, "profile_conflict")
    assert "--backend-profile=gloo" in line and "'nccl'" in line and "offsetblind" in line


def test_max_world_size_above_eight_is_a_usage_error(tmp_path: Path) -> None:
    line = _usage_error(tmp_path, "world9")
    assert "--max-world-size" in line and "9" in line


def _cells(report: Path) -> dict[tuple[str, str, str], dict[str, int]]:
    """(collective, dtype, op) -> outcome counts summed over layouts, from the JSON capability report."""
    data = json.loads(report.read_text())
    cells: dict[tuple[str, str, str], dict[str, int]] = {}
    for rec in data["cells"]:
        counts = cells.setdefault((rec["collective"], rec["dtype"], rec["op"]), {})
        for outcome, n in rec["counts"].items():
            counts[outcome] = counts.get(outcome, 0) + n
    return cells


def test_wrong_backend_is_caught(tmp_path: Path) -> None:
    rc, out, err = run_scenario(tmp_path, "wrongsum")
    text = out + err
    assert rc == pytest.ExitCode.TESTS_FAILED, text[-4000:]
    for cell in WRONG_CELLS:
        assert f"FAILED conformance/test_collectives.py::test_collective[{cell}]" in text, text[-4000:]
    assert "FAIL: wrong result" in text
    assert "2 failed" in text
    # a finding names where it ran (torch; on GPUs also CUDA, NCCL, driver and device)
    assert "ranks ran on: torch " in text and "| backend wrongsum |" in text, text[-4000:]
    report = tmp_path / "reports" / "wrongsum" / "capability-wrongsum.json"
    cells = _cells(report)
    assert set(cells) == {("all_reduce", "float32", "sum"), ("all_reduce", "int32", "sum")}
    for counts in cells.values():
        assert counts.get("FAIL", 0) >= 1, counts
        assert set(counts) <= {"FAIL", "pass"}, counts  # probed: every example either right or wrong
    data = json.loads(report.read_text())
    assert data["metadata"]["backend"] == "wrongsum" and data["totals"]["FAIL"] >= 2
    assert data["metadata"]["ranks"]["backend"] == "wrongsum" and data["metadata"]["ranks"]["torch"]
    details = [d for rec in data["cells"] for o, d in rec["details"].items() if o == "FAIL"]
    assert details and all(d.startswith("wrong result") for d in details)
    md = (tmp_path / "reports" / "wrongsum" / "capability-wrongsum.md").read_text()
    assert "| float32 | FAIL |" in md and "| int32 | FAIL |" in md
    assert "Ranks ran on: torch " in md


def test_gloo_selection_passes_and_writes_the_report(tmp_path: Path) -> None:
    rc, out, err = run_scenario(tmp_path, "gloo")
    text = out + err
    assert rc == pytest.ExitCode.OK, text[-4000:]
    summary = [line for line in text.splitlines() if "deselected" in line][-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    # barrier passes; broadcast passes, or XFAILs where it drew a strided view (finding gloo-strided-views)
    assert counts.get("passed", 0) >= 1 and counts.get("passed", 0) + counts.get("xfailed", 0) == 2, summary
    directory = tmp_path / "reports" / "gloo"
    md, js = directory / "capability-gloo.md", directory / "capability-gloo.json"
    assert md.is_file() and js.is_file()
    cells = _cells(js)
    assert set(cells) == {("barrier", "-", "-"), ("broadcast", "float32", "-")}
    assert set(cells[("barrier", "-", "-")]) == {"pass"}
    # broadcast of a strided view is a confirmed gloo defect (findings.py): "known" where it was drawn
    assert set(cells[("broadcast", "float32", "-")]) <= {"pass", "known"}
    assert cells[("broadcast", "float32", "-")].get("pass", 0) >= 1
    data = json.loads(js.read_text())
    assert data["metadata"]["backend"] == "gloo" and "FAIL" not in data["totals"]
    text_md = md.read_text()
    assert text_md.startswith("# Capability report: backend `gloo`")
    assert "## barrier" in text_md and "## broadcast" in text_md and "| float32 |" in text_md

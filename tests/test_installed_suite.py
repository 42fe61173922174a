"""The conformance suite run from where it is installed, as docs/use-in-your-project.md says: the folder
form works from any directory; `pytest --pyargs conformance` fails, as the page says it does (if a pytest
release makes it work, this test says so, and the page can change). .ci/run does the same with a wheel
installed into a fresh venv."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import conformance

from tests.processes import run_bounded

SUITE = os.path.dirname(conformance.__file__)
PAGE = Path(__file__).resolve().parent.parent / "docs" / "use-in-your-project.md"


def _pytest(cwd: Path, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    done = run_bounded([os.path.join(os.path.dirname(sys.executable), "pytest"), "-p", "no:cacheprovider", *args],
                       180, cwd=cwd, env=env)
    return done.returncode, done.stdout + done.stderr


def test_the_page_gives_the_folder_form() -> None:
    text = PAGE.read_text()
    assert 'SUITE=$(python -c "import conformance, os; print(os.path.dirname(conformance.__file__))")' in text
    assert 'pytest "$SUITE" --backend=mine --backend-module=my_backend' in text


def test_the_installed_folder_runs_from_another_directory(tmp_path: Path) -> None:
    rc, out = _pytest(tmp_path, SUITE, "--backend=gloo", "-k", "all_reduce-float32-sum", "--collect-only", "-q",
                      "--report-dir", str(tmp_path / "reports"))
    assert rc == 0, out[-3000:]
    assert "test_collective[all_reduce-float32-sum]" in out


def test_pyargs_stops_at_the_suites_options_as_the_page_says(tmp_path: Path) -> None:
    rc, out = _pytest(tmp_path, "--pyargs", "conformance", "--backend=mine", "--collect-only", "-q")
    assert rc == 4, out[-3000:]
    assert "unrecognized arguments: --backend=mine" in out
    assert "`unrecognized arguments: --backend=mine`" in PAGE.read_text()

"""simgpu installed next to a user's own project: nothing of it collides with what ML repos commonly
have (their own --backend option, their own `conformance` package), and the `ranks` fixture works there.

The project lives in a temporary directory outside this repository, and pytest runs there as a user
runs it (`python -m pytest`), finding simgpu only as an installed package.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FILES = {
    "conftest.py": '''
        def pytest_addoption(parser):
            parser.addoption("--backend", default="mine", help="the project's own option")
    ''',
    "conformance/__init__.py": "",
    "conformance/checks.py": '''
        def answer():
            return 42
    ''',
    "conformance/test_own.py": '''
        from conformance.checks import answer


        def test_own_package_and_option(pytestconfig):
            assert answer() == 42 and pytestconfig.getoption("--backend") == "mine"
    ''',
    "test_dist.py": '''
        import pytest
        import torch
        import torch.distributed as dist


        def add_ranks(ctx):
            t = torch.tensor([ctx.rank + 1.0], device=ctx.device)
            dist.all_reduce(t)
            return t.item()


        @pytest.mark.world_size(2)
        def test_all_reduce(ranks):
            assert ranks.run(add_ranks) == [3.0, 3.0]
    ''',
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("user_project")
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=300)


def test_own_backend_option_and_conformance_package_run_beside_the_ranks_fixture(project: Path) -> None:
    done = _pytest(project, "-rA")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED conformance/test_own.py::test_own_package_and_option" in done.stdout
    assert "PASSED test_dist.py::test_all_reduce[ws2]" in done.stdout


def test_simgpu_adds_only_namespaced_options(project: Path) -> None:
    done = _pytest(project, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    ours = [line.split()[0] for line in done.stdout.splitlines() if line.strip().startswith("--simgpu")]
    assert "--simgpu-backend=SIMGPU_BACKEND" in ours or "--simgpu-backend" in " ".join(ours)
    for suite_option in ("--conformance-profile", "--max-world-size", "--report-dir", "--rank-timeout", "--predict"):
        assert suite_option not in done.stdout, suite_option
    assert done.stdout.count("--backend=BACKEND") == 1  # the project's own


def test_a_bad_simgpu_option_is_one_line(project: Path) -> None:
    done = _pytest(project, "test_dist.py", "--simgpu-backend=nosuch")
    assert done.returncode != 0
    assert "--simgpu-backend: unknown backend 'nosuch'" in done.stdout + done.stderr


def test_a_shadowed_conformance_package_is_named_in_one_line(project: Path) -> None:
    """simgpu's benchmark reads its suite as `conformance`; the project's own package of that name,
    first on sys.path under `python -m`, is named instead of failing deep inside."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "realgpu.bench", "--backend", "gloo"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (f"realgpu-bench: the package 'conformance' here is {project / 'conformance'}, not "
                                   f"simgpu's suite ({Path(__file__).resolve().parent.parent / 'conformance'}): "
                                   "a package of your project shadows it; run from another directory")

"""Every command the README shows runs as written from a clone.

The commands are the lines of the README's indented blocks that start with a command (`$ ` prompts
included). Each one must be listed in HOW with the way this test holds it to the README: the cheap ones
run as written (from the repository root, the venv's commands first on PATH, as after `source
.venv/bin/activate`); the conformance runs, minutes long, run as written up to collection (their
options, backend and -k selection are accepted and select tests); the set-up commands are the ones
.ci/run runs; the GPU ones need GPUs. A README command missing from HOW, or an entry of HOW the
README no longer shows, fails: the list cannot drift from the page.
"""
from __future__ import annotations

import configparser
import os
import re
import sys
from pathlib import Path

import pytest

from tests.processes import REPO, run_bounded

COMMAND_WORDS = ("python3 ", "python ", "simgpu ", "pytest ", "pip ", "tox ", "realgpu-bench ", "git ")

SETUP_SIM = ("python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e . && "
             ".venv/bin/pytest conformance --backend=sim -n 2")
SETUP_TESTS = ("python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e '.[test]' && "
               ".venv/bin/pytest tests -n 2")
SPAWN = "simgpu run --gpus 2 examples/programs/ddp_spawn.py"
TORCHRUN = "simgpu run --gpus 4 torchrun --nproc-per-node 4 examples/programs/ddp_torchrun.py"
FIXTURE = "pytest examples/test_my_allreduce.py -v"
SUITE_SIM = "pytest conformance --backend=sim -n 2"
SUITE_GLOO = "pytest conformance --backend=gloo -k all_reduce-float32-sum"
SUITE_MINE = ("pytest conformance --backend=mine --backend-module=examples.my_backend --backend-profile=gloo "
              "-k all_reduce-float32-sum")
TOX = "pip install -q tox && tox -e torch213"
GPU_SUITE = ("python -m pip install --no-deps --no-build-isolation -e . && "
             "python -m pytest conformance --backend=nccl -n 2")
GPU_BENCH = "realgpu-bench -b 8 -e 1G -f 2 -g 4"

HOW = {
    SETUP_SIM: "ci", SETUP_TESTS: "ci",
    SPAWN: "run", TORCHRUN: "run", FIXTURE: "run",
    SUITE_SIM: "collect", SUITE_GLOO: "collect", SUITE_MINE: "collect",
    TOX: "tox",
    GPU_SUITE: "gpu", GPU_BENCH: "gpu",
}
EXPECT = {  # what a run as written must print
    SPAWN: r"(?m)^step 4 loss \S+\nfinal \S+",
    TORCHRUN: r"(?m)^step 3 loss \S+$[\s\S]*^final \S+",
    FIXTURE: r"examples/test_my_allreduce.py::test_allreduce_sums_every_rank\[ws4\] PASSED",
}


def readme_commands(text: str) -> list[str]:
    """Lines of indented blocks that start with a command word, without a `$ ` prompt or a `# comment`."""
    found = []
    for line in text.splitlines():
        if not line.startswith("    "):
            continue
        command = line[4:].removeprefix("$ ")
        if command.startswith(COMMAND_WORDS):
            found.append(re.sub(r"\s+#.*$", "", command).strip())
    return found


def test_every_readme_command_is_held_to_the_readme() -> None:
    commands = readme_commands((REPO / "README.md").read_text())
    assert SPAWN in commands and FIXTURE in commands  # the extraction finds what it must
    assert sorted(set(commands)) == sorted(HOW), "README commands and tests/test_readme_commands.py's HOW differ"


def _as_after_activate() -> dict[str, str]:
    """The environment after `source .venv/bin/activate`: this venv's commands first, nothing of this run."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "CI", "SIMGPU_PROFILE")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = sys.prefix
    return env


@pytest.mark.parametrize("command", [pytest.param(SPAWN, id="spawn"), pytest.param(FIXTURE, id="fixture"),
                                     pytest.param(TORCHRUN, id="torchrun", marks=pytest.mark.full)])
def test_the_cheap_commands_run_as_written(command: str) -> None:
    done = run_bounded(["bash", "-c", command], 300, cwd=REPO, env=_as_after_activate())
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert re.search(EXPECT[command], done.stdout), out[-4000:]


@pytest.mark.parametrize("command", [c for c, how in HOW.items() if how == "collect"])
def test_the_conformance_commands_select_tests_as_written(command: str, tmp_path: Path) -> None:
    """Up to collection, serially (-n 0): the options parse, the backend is accepted, -k selects."""
    done = run_bounded(["bash", "-c", f"{command} --collect-only -q -n 0 --report-dir {tmp_path}"], 180, cwd=REPO,
                       env=_as_after_activate())
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert re.search(r"\b\d+(/\d+)? tests collected\b", out), out[-4000:]


def test_the_setup_commands_are_what_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    for command in (c for c, how in HOW.items() if how == "ci"):
        assert command in ci, command


def test_the_tox_command_installs_tox_and_names_an_env_with_this_torch() -> None:
    """The set-up installs no tox: the README's command does, before using it."""
    assert TOX.startswith("pip install -q tox && ")
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(REPO / "tox.ini")
    env = TOX.rsplit("-e ", 1)[1]
    assert ini.get(f"testenv:{env}", "deps").strip() == "torch==2.13.0"


def test_the_gpu_commands_name_what_exists() -> None:
    """Without GPUs they cannot run; the command and every flag they name must exist."""
    assert re.search(r'(?m)^realgpu-bench = "realgpu.bench:main"$', (REPO / "pyproject.toml").read_text())
    done = run_bounded([sys.executable, "-m", "realgpu.bench", "--help"], 120, cwd=REPO, env=_as_after_activate())
    assert done.returncode == 0, done.stderr[-2000:]
    for flag in re.findall(r"(?<= )-\w\b", GPU_BENCH):
        assert re.search(rf"(?m)^\s+{flag}\b", done.stdout), (flag, done.stdout)

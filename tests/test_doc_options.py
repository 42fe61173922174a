"""Every command-line option the README and docs/ name exists: a doc that names an option users then
type and see rejected (docs/robustness.md once named `--rank-timeout` for the fixture, whose option is
`--simgpu-rank-timeout`) fails here.

Options come from their parsers, not from a copy: the `ranks` fixture's and the suite's pytest hooks
(recorded), `simgpu run`'s argparse parser, torchrun's, pytest's own with its installed plugins
(`pytest --help`), and every add_argument/addoption in this repository's scripts. Only the options of
programs outside it (pip, a user's train.py) are listed by hand.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.processes import REPO, run_bounded

OPTION = re.compile(r"(?<![\w/.-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
DEFINED = re.compile(r"""(?:add_argument|addoption)\(\s*(?:"-\w",\s*)?"(--[a-z0-9-]+)\"""")
OUTSIDE = {  # options of programs this repository does not contain, where the docs name them
    "--no-deps", "--no-build-isolation", "--index-url",  # pip
    "--lr", "--epochs",  # a user's train.py, in `simgpu run --gpus 2 train.py --lr 0.1`
    "--dummy",  # pytorch/examples' imagenet main.py, among the public programs tried
    "--junitxml",  # pytest's alias of --junit-xml, which its --help does not list
    "--native", "--threads", "--subprocesses",  # py-spy record, in the overhead profile (simgpu-run.md)
}
# Pages about a user's own pytest run: no suite options, only the project's own `--backend`, named as
# the option simgpu leaves alone.
USER_PYTEST_PAGES = {"testing-your-code.md": {"--backend"}, "use-in-your-project.md": {"--backend"}}


class _Recorder:
    """Stands in for pytest's parser: records the long option names a plugin's pytest_addoption adds."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def getgroup(self, *args: Any, **kwargs: Any) -> "_Recorder":
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.names.update(n for n in names if n.startswith("--"))

    def addini(self, *args: Any, **kwargs: Any) -> None:
        pass


def _recorded(plugin: Any) -> set[str]:
    recorder = _Recorder()
    plugin.pytest_addoption(recorder)
    return recorder.names


def pages() -> dict[str, str]:
    found = {"README.md": (REPO / "README.md").read_text()}
    found.update({p.name: p.read_text() for p in sorted((REPO / "docs").glob("*.md"))})
    return found


def named(text: str) -> set[str]:
    return {m for m in OPTION.findall(text) if m != "--simgpu"}  # `--simgpu-...`: the family, not one option


@pytest.fixture(scope="module")
def fixture_options() -> set[str]:
    import simgpu.testing

    return _recorded(simgpu.testing)


@pytest.fixture(scope="module")
def pytest_options(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """pytest's own options and its installed plugins' (xdist, hypothesis, simgpu), from a directory
    without conftests."""
    done = run_bounded([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], 120,
                       cwd=tmp_path_factory.mktemp("no_conftest"))
    assert done.returncode == 0, done.stderr[-2000:]
    specs = [ln.strip().split("  ")[0] for ln in done.stdout.splitlines() if ln.lstrip().startswith("-")]
    return {m for spec in specs for m in re.findall(r"--[a-z][a-z0-9-]*", spec)}


@pytest.fixture(scope="module")
def every_option(fixture_options: set[str], pytest_options: set[str]) -> set[str]:
    import conformance.plugin
    from torch.distributed.run import get_args_parser

    from simgpu.launcher import _parser
    from tests import conftest

    run_parser = _parser()._subparsers._group_actions[0].choices["run"]  # `simgpu run`
    torchrun = {s for a in get_args_parser()._actions for s in a.option_strings if s.startswith("--")}
    sources = [p for d in ("simgpu", "realgpu", "conformance", "benchmarks", "tests") for p in (REPO / d).rglob("*.py")]
    defined = {m for p in sources for m in DEFINED.findall(p.read_text())}
    return (fixture_options | pytest_options | _recorded(conformance.plugin) | _recorded(conftest) | torchrun
            | {s for a in run_parser._actions for s in a.option_strings} | defined | OUTSIDE)


def test_the_parsers_are_read() -> None:
    """The sources the check relies on give what they must (else the test below would pass on nothing)."""
    import conformance.plugin
    import simgpu.testing

    assert {"--simgpu-backend", "--simgpu-rank-timeout"} <= _recorded(simgpu.testing)
    assert {"--backend", "--rank-timeout", "--conformance-profile", "--report-dir"} <= _recorded(conformance.plugin)
    assert {"--backend-module", "--max-world-size"} <= named(pages()["conformance-suite.md"])


def test_every_option_a_page_names_exists(every_option: set[str]) -> None:
    unknown = {name: sorted(named(text) - every_option) for name, text in pages().items()}
    assert not {k: v for k, v in unknown.items() if v}, unknown


def test_simgpu_options_are_the_fixtures(fixture_options: set[str]) -> None:
    """Every `--simgpu-*` a page names is an option of the `ranks` fixture's plugin."""
    wrong = {name: sorted(o for o in named(text) if o.startswith("--simgpu-") and o not in fixture_options)
             for name, text in pages().items()}
    assert not {k: v for k, v in wrong.items() if v}, wrong


def test_pages_about_your_own_pytest_run_name_no_suite_option(fixture_options: set[str],
                                                               pytest_options: set[str]) -> None:
    """A project's pytest has pytest's, its plugins' and the fixture's options, not the suite's
    (`--rank-timeout`, `--max-world-size`): those exist only under `pytest conformance`."""
    import conformance.plugin

    suite_only = _recorded(conformance.plugin) - fixture_options - pytest_options
    assert {"--rank-timeout", "--max-world-size"} <= suite_only
    for page, the_projects_own in USER_PYTEST_PAGES.items():
        text = (REPO / "docs" / page).read_text()
        text = re.sub(r"(?ms)^## The conformance suite.*?(?=^## |\Z)", "", text)  # that section runs the suite
        wrong = sorted((named(text) & suite_only) - the_projects_own)
        assert not wrong, (page, wrong)

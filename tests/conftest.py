"""The project's own tests come in two tiers. The README's test command runs every test at its smallest
size: each example program at one GPU count, each broken backend on one hypothesis seed, the input-class
search on one dtype per collective. `--full` adds the rest (tests marked `full`, see tests/tiers.py): the
other GPU counts, seeds and dtypes. CI runs both; `-m full --full` runs only the second tier."""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true",
                     help="also run the tests marked full: every example program at every GPU count, "
                          "each broken backend on three hypothesis seeds, every dtype of the input-class search")
    parser.addoption("--opinfo-all", action="store_true",
                     help="also run the OpInfo sweep over every dtype and sample (tests marked opinfo_all: "
                          "hours on 2 cores, so neither tier runs it)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full: a larger size or another seed of a test that runs by default; "
                                       "runs with --full")
    config.addinivalue_line("markers", "opinfo_all: the OpInfo sweep's every dtype and sample; runs with --opinfo-all")
    # tests import conformance/test_collectives.py, whose cells carry the suite's marker (conformance/plugin.py)
    config.addinivalue_line("markers", "conformance: a conformance property test (one matrix cell)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_all = pytest.mark.skip(reason="the OpInfo sweep over every dtype and sample: --opinfo-all runs it")
    skip = pytest.mark.skip(reason="a larger size or another seed of a test that runs by default: --full runs it")
    for item in items:
        if item.get_closest_marker("opinfo_all") and not config.getoption("--opinfo-all"):
            item.add_marker(skip_all)
        elif item.get_closest_marker("full") and not config.getoption("--full"):
            item.add_marker(skip)


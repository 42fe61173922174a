"""--simgpu-backend (and the suite's --backend) offers only backends simgpu's ranks can run: torch's
others (mpi, ucc, xccl, fake) are refused in one line saying why, instead of failing every test."""
from __future__ import annotations

import pytest
import torch.distributed as dist

from simgpu.selection import BackendChoiceError, check_backend, usable_backends


@pytest.mark.parametrize("name", ["fake", "mpi", "xccl"] + ([] if dist.is_ucc_available() else ["ucc"]))
def test_torch_backends_that_cannot_run_ranks_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(BackendChoiceError) as err:
        check_backend(name, None, option="--simgpu-backend")
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"--simgpu-backend={name}: ")
    assert text.endswith("choose one of: gloo, nccl, sim")


def test_the_choices_offered_are_the_ones_that_run() -> None:
    assert usable_backends() == ["gloo", "nccl", "sim"] + (["ucc"] if dist.is_ucc_available() else [])
    with pytest.raises(BackendChoiceError, match=r"unknown backend 'nosuch' .*; choose one of: gloo, nccl, sim"):
        check_backend("nosuch", None, option="--simgpu-backend")
    check_backend("gloo", None, option="--simgpu-backend")
    check_backend("sim", None, option="--simgpu-backend")


def test_fake_is_refused_also_once_torch_registered_it_as_a_plugin() -> None:
    """Importing torch's fake_pg (some test suites do) registers "fake" as a plugin; still refused."""
    import torch.testing._internal.distributed.fake_pg  # noqa: F401

    assert "FAKE" in dist.Backend._plugins
    with pytest.raises(BackendChoiceError, match=r"^--simgpu-backend=fake: torch's fake backend communicates nothing"):
        check_backend("fake", None, option="--simgpu-backend")

"""A "cpu:gloo,cuda:nccl" group (and init_process_group() with no backend) keeps host-tensor collectives
on a communicator of their own, as CUDA's gloo + NCCL pair does (simgpu/cuda_sim/host_channel.py); found by
a public-style program, examples/programs/dcp_async_resume.py (async_save's background collectives)."""
from __future__ import annotations

import pytest

from tests.test_example_programs import free_port
from tests.test_simgpu_run import SCRIPTS, simgpu_run


def test_host_and_gpu_collectives_keep_separate_orders() -> None:
    done = simgpu_run(2, "torchrun", "--nproc-per-node", "2", "--master-port", str(free_port()),
                      str(SCRIPTS / "host_and_gpu_group.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK host_and_gpu_group" in done.stdout


@pytest.mark.parametrize("backend", ["nccl-lazy", "cuda:nccl"])
def test_nccl_variants_and_gpu_only_maps_are_nccl_groups(backend: str) -> None:
    """torch 2.15's "nccl-lazy" (what its pipelining recommends) and a map without "cpu" became groups that
    took host tensors ("nccl" in the name sufficed), where NCCL refuses them."""
    done = simgpu_run(2, "torchrun", "--nproc-per-node", "2", "--master-port", str(free_port()),
                      str(SCRIPTS / "nccl_backend_names.py"), backend)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert f"OK nccl_backend_names {backend}" in done.stdout

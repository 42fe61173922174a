"""Ops whose CUDA kernels differ from the host's in dtype, shape or answer (issue 26, found by the every-sample
OpInfo sweep on a GPU box): half-precision batch/layer norm statistics, LU without pivoting, trace under
autocast, integer remainder by zero, float16 rrelu. The program runs under `simgpu run` in a fresh process."""
from __future__ import annotations

from tests.test_simgpu_run import SCRIPTS, simgpu_run


def test_cuda_op_layer_on_simulated_gpus() -> None:
    done = simgpu_run(2, str(SCRIPTS / "cuda_op_layer.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK cuda_op_layer" in done.stdout

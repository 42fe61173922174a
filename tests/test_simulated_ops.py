"""The op layer on simulated GPUs (docs/simulated-device-suite.md): CUDA's autocast, torch.func transforms,
FlexAttention, checkpointing and control flow, scaled_dot_product_attention's CUDA dispatch, the per-op decisions the simulation caches, each a program run by `simgpu run` in a fresh process (the
simulation patches torch process-wide); and the autocast table held to the installed torch."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from simgpu.cuda_sim import autocast
from tests.test_simgpu_run import SCRIPTS, simgpu_run


@pytest.mark.parametrize("script", ["autocast_cuda.py", "functorch_flex.py", "higher_order_ops.py", "checkpointed_hops.py",
                                    "half_precision.py", "fast_paths.py"])
def test_program_on_simulated_gpus(script: str) -> None:
    done = simgpu_run(2, str(SCRIPTS / script))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert f"OK {script[:-3]}" in done.stdout


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_fused_rms_norm"), reason="torch < 2.8 has no fused RMSNorm")
@pytest.mark.parametrize("plan", [False, True])
def test_rms_norm_is_cudas_fused_kernel(plan: bool) -> None:
    """F.rms_norm on a simulated GPU: one fused op, autograd saving what CUDA's saves (the host's composite kept
    two more tensors of the input's size: +0.16-0.24 GiB a Llama pipeline stage against 4 H200s), its values
    torch's reference decomposition of the fused kernel; the same memory under a plan."""
    args = ("--plan", "h200-141g") if plan else ()
    done = simgpu_run(1, *args, sys.executable, str(SCRIPTS / "rms_norm_fused.py"), *(["--plan"] if plan else []))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK rms_norm_fused" in done.stdout


def test_attention_dispatched_as_on_cuda() -> None:
    """scaled_dot_product_attention takes CUDA's kernels and ops: context parallelism and DTensor rules apply."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = simgpu_run(2, torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "sdpa_dispatch.py"),
                      timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert done.stdout.count("OK sdpa_dispatch") == 2


def _autocast_cuda_ops() -> set[str]:
    """The ops the installed torch registers an AutocastCUDA kernel for (compiled into the CPU wheel too)."""
    return {name for name in torch._C._dispatch_get_all_op_names()
            if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA")}


def test_autocast_table_is_the_installed_torchs() -> None:
    """A torch whose CUDA autocast lists change fails here, naming the ops to add to or drop from autocast.py."""
    installed = _autocast_cuda_ops()
    assert installed, "this torch registers no AutocastCUDA kernels: the check cannot see CUDA's lists"
    table = set(autocast.table())
    assert not installed - table, f"CUDA autocasts ops the table lacks: {sorted(installed - table)}"
    assert not table - installed, f"the table names ops CUDA no longer autocasts: {sorted(table - installed)}"

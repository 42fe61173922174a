"""The public CUDA surface of the installed torch, held to real CUDA name by name.

tests/sim_scripts/cuda_surface.py runs under `simgpu run --gpus 2`: every public name of torch.cuda
(and its submodules), torch.accelerator and torch.backends.cuda/cudnn must be simulated and checked,
torch's own and checked, or refused with one line naming it; a name in none of these (a new torch's)
fails. Where fingerprints recorded on real GPUs exist (tests/cuda_reference/surface-*.json, made
with `--record` on a GPU box), every checked name is compared with them."""
from __future__ import annotations

from pathlib import Path

from tests.test_simgpu_run import SCRIPTS, simgpu_run

REFERENCES = sorted((Path(__file__).resolve().parent / "cuda_reference").glob("surface-*.json"))


def test_every_public_cuda_name_is_simulated_and_checked_or_refused_in_one_line() -> None:
    args = [str(SCRIPTS / "cuda_surface.py")]
    for reference in REFERENCES[-1:]:
        args += ["--reference", str(reference)]
    done = simgpu_run(2, *args)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert " 0 unclassified" in done.stdout, done.stdout

"""The public CUDA surface of the installed torch, held to real CUDA name by name.

tests/sim_scripts/cuda_surface.py runs under `simgpu run --gpus 2`: every public name of torch.cuda
(and its submodules), torch.accelerator and torch.backends.cuda/cudnn must be simulated and checked,
torch's own and checked, or refused with one line naming it; a name in none of these (a new torch's)
fails. Where fingerprints recorded on real GPUs exist (tests/cuda_reference/*.json, made with
`--record` on a GPU box), every checked name is compared with them."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.test_simgpu_run import SCRIPTS, simgpu_run

REFERENCE_DIR = Path(__file__).resolve().parent / "cuda_reference"


def _latest_reference(kind: str) -> list[str]:
    """--reference and the newest recording of this kind, if one is committed."""
    found = sorted(REFERENCE_DIR.glob(f"{kind}-*.json"))
    return ["--reference", str(found[-1])] if found else []


def test_every_public_cuda_name_is_simulated_and_checked_or_refused_in_one_line() -> None:
    done = simgpu_run(2, str(SCRIPTS / "cuda_surface.py"), *_latest_reference("surface"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert " 0 unclassified" in done.stdout, done.stdout


def test_every_device_argument_form_lands_where_cuda_puts_it() -> None:
    """Factories taking device= in every GPU spelling, Tensor and Module methods that move or cast."""
    done = simgpu_run(2, str(SCRIPTS / "device_arguments.py"), *_latest_reference("device-arguments"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK device_arguments" in done.stdout


INSTANCE_ATTRIBUTES = ("priority", "cuda_stream", "cuda_event")  # set by __init__ on the simulated classes


def test_streams_and_events_answer_as_on_an_h200() -> None:
    """Every public attribute of CUDA's Stream and Event classes (recorded from a CUDA build: a CPU build's
    classes lack the C++ ones) exists on the simulated ones; cuda_api.py checks the GPU's values."""
    from simgpu.cuda_sim import api

    recorded = json.loads((Path(__file__).parent / "cuda_reference/stream-event-2.11.0+cu130.json").read_text())
    names = recorded["public_attributes (torch 2.15.0+cu132, CUDA build, no GPU needed)"]
    for cls in (api.Stream, api.Event):
        real = getattr(torch.cuda, cls.__name__)  # on a CUDA build, the installed torch's own attributes too
        wanted = set(names[cls.__name__]) | {name for name in dir(real) if not name.startswith("_")}
        missing = [name for name in sorted(wanted) if not hasattr(cls, name) and name not in INSTANCE_ATTRIBUTES]
        assert not missing, f"{cls.__name__} lacks {missing}"
    assert list(api.Stream.priority_range()) == recorded["priority_range"]  # the values: sim_scripts/cuda_api.py

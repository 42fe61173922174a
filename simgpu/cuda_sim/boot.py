"""Start the simulation in a process the moment it imports torch (used by simgpu's sitecustomize)."""
from __future__ import annotations

import importlib.abc
import os
import importlib.util
import sys
from typing import Any

from simgpu.cuda_sim.errors import SimulationError

EXIT_NOT_SIMULATED = 3


class _ActivateAfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as usual, and activates the simulation right after torch's module has run."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_torch = loader.exec_module

        def exec_module(module: Any) -> None:
            run_torch(module)
            activate_or_exit()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _one_line_for_simulation_errors(original: Any) -> Any:
    def excepthook(exc_type: type, exc: BaseException, tb: Any) -> None:
        if isinstance(exc, SimulationError):
            sys.stderr.write(f"simgpu run: {exc}\n")
            sys.stderr.flush()
            return
        original(exc_type, exc, tb)

    return excepthook


def activate_or_exit() -> None:
    """Simulate GPUs in this process, or stop it with one line: a program that runs without the
    simulation it was launched under would report results from no GPU at all."""
    try:
        import simgpu.cuda_sim

        simgpu.cuda_sim.activate()
    except Exception as exc:  # noqa: BLE001 - any failure to simulate ends the process
        import torch

        message = str(exc) if isinstance(exc, SimulationError) else \
            f"simgpu: the GPU simulation could not start on torch {torch.__version__}: {type(exc).__name__}: {exc}"
        sys.stderr.write(f"simgpu run: {message}\n")
        sys.stderr.flush()
        os._exit(EXIT_NOT_SIMULATED)


def install_import_hook() -> None:
    if "torch" in sys.modules:
        activate_or_exit()
    elif not any(isinstance(f, _ActivateAfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _ActivateAfterTorch())
    sys.excepthook = _one_line_for_simulation_errors(sys.excepthook)

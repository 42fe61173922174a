"""Start the simulation in a process the moment it imports torch (used by simgpu's sitecustomize)."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

from simgpu.cuda_sim.devices import SimulationError


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
            import simgpu.cuda_sim

            simgpu.cuda_sim.activate()

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


def install_import_hook() -> None:
    if "torch" in sys.modules:
        import simgpu.cuda_sim

        simgpu.cuda_sim.activate()
    elif not any(isinstance(f, _ActivateAfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _ActivateAfterTorch())
    sys.excepthook = _one_line_for_simulation_errors(sys.excepthook)

"""Loaded by every Python process of a `simgpu run`: simulate GPUs once torch is imported.

Nothing is imported eagerly, not even the simgpu package: a process that never imports torch (a
tool the program starts, a Python without torch) pays nothing and sees nothing. The moment the
process imports torch, the simulation starts (simgpu.cuda_sim.activate), or the process stops with
one line and exit status 3: a program launched on simulated GPUs never runs on none. Any other
sitecustomize on the path still runs, after this one.

When the run has a warm template (simgpu/template.py), a process that would import torch as a rank
does is first offered to it (template_proxy.py): a fork of the template, which has imported torch
and started the simulation once for the whole run, runs this process's program, and this process
stands in for it until it exits.
"""
import importlib.abc
import importlib.util
import os
import sys

EXIT_NOT_SIMULATED = 3


class _ActivateAfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as usual, and activates the simulation right after torch's module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        run_torch = spec.loader.exec_module

        def exec_module(module):
            run_torch(module)
            activate_or_exit()

        spec.loader.exec_module = exec_module
        return spec


def activate_or_exit():
    """Simulate GPUs in this process, or stop it with one line."""
    try:
        import simgpu.cuda_sim

        simgpu.cuda_sim.activate()
    except Exception as exc:  # noqa: BLE001 - any failure to simulate ends the process
        import torch

        message = str(exc) if _is_simulation_error(exc) else \
            f"simgpu: the GPU simulation could not start on torch {torch.__version__}: {type(exc).__name__}: {exc}"
        sys.stderr.write(f"simgpu run: {message}\n")
        sys.stderr.flush()
        os._exit(EXIT_NOT_SIMULATED)


def _is_simulation_error(exc):
    errors = sys.modules.get("simgpu.cuda_sim.errors")
    return errors is not None and isinstance(exc, errors.SimulationError)


def _one_line_for_simulation_errors(original):
    def excepthook(exc_type, exc, tb):
        if _is_simulation_error(exc):
            sys.stderr.write(f"simgpu run: {exc}\n")
            sys.stderr.flush()
            return
        original(exc_type, exc, tb)

    return excepthook


def _install_import_hook():
    if "torch" in sys.modules:
        activate_or_exit()
    elif not any(isinstance(f, _ActivateAfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _ActivateAfterTorch())
    sys.excepthook = _one_line_for_simulation_errors(sys.excepthook)


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_simgpu_chained_sitecustomize", candidate)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _serve_from_template():
    """Hand this process's program to the run's warm template, if it has one (never returns then)."""
    if not os.environ.get("SIMGPU_TEMPLATE_SOCKET"):
        return
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "template_proxy.py")
    spec = importlib.util.spec_from_file_location("_simgpu_template_proxy", path)  # no simgpu import: no torch
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.serve_or_continue()


def _not_in_the_plans_sample():
    """A torchrun worker whose rank a plan of a sample of ranks (`--ranks`, cuda_sim/plan_roles.py) does not
    run: it exits at once, before importing anything (the ranks that run never wait for it)."""
    sample = os.environ.get("SIMGPU_PLAN_RANKS")  # simgpu.cuda_sim.plan.ENV_RANKS (nothing imported yet here)
    rank = os.environ.get("RANK")
    if not sample or rank is None or "TORCHELASTIC_RESTART_COUNT" not in os.environ:
        return False
    return rank not in sample.split(",")


if os.environ.get("SIMGPU_GPUS") and _not_in_the_plans_sample():
    sys.stdout.flush()
    os._exit(0)
if os.environ.get("SIMGPU_GPUS"):
    try:
        _serve_from_template()
    except Exception as exc:  # noqa: BLE001 - the process starts on its own; never unsimulated
        sys.stderr.write(f"simgpu run: the warm template could not take this process ({type(exc).__name__}: "
                         f"{exc}); it imports torch itself\n")
    _install_import_hook()
_chain_next_sitecustomize()

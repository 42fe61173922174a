"""Loaded by every Python process of a `simgpu run`: simulate GPUs once torch is imported.

Nothing is imported eagerly (a process that never imports torch pays nothing). Any other
sitecustomize on the path still runs, after this one.
"""
import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.util

    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_simgpu_chained_sitecustomize", candidate)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


if os.environ.get("SIMGPU_GPUS"):
    from simgpu.cuda_sim.boot import install_import_hook

    install_import_hook()
_chain_next_sitecustomize()

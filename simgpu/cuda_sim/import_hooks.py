"""Run a function right after a module is imported, or at once if it already is.

Some of torch's modules are costly to import (torch.utils.cpp_extension pulls in setuptools: ~2 s),
so the simulation adjusts them only in processes that import them.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[Any], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module
        callback = self.callback

        def exec_module(module: Any) -> None:
            run_module(module)
            callback(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    """Call `callback(module)` once `name` is imported in this process."""
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))

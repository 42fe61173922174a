"""Modules the simulation imports for itself stay out of the program's sight until the program imports them.

Starting the simulation imports torch._dynamo (torch.compiler.set_stance), and the warm template also
imports torch.distributed.fsdp and torch.distributed.tensor, so that no process pays for them again. On a
GPU a process that never imports those has not run their import-time side effects, and one of them is
visible: `import torch.distributed.tensor` (reached from torch._dynamo through torch.distributed.fsdp)
marks DTensor, DeviceMesh and the placements safe for `torch.load(weights_only=True)`, which otherwise
refuses a DTensor checkpoint ("``torch.distributed.tensor`` must be imported to load DTensors").
PyTorch's test_dtensor_save_load_import checks exactly that, in a fresh `python -c "import torch; ..."`.

So, while the simulation starts (`begin()` to `finish()`), every import statement is recorded (importer,
imported) and every `torch.serialization.add_safe_globals` call with its caller. `finish()` then takes out
of `sys.modules` the torch modules first imported in that window from which an import chain reaches
torch.distributed.tensor (importing a module imports its parent packages too), and withdraws the safe
globals those modules registered. The module objects stay alive and loaded: the first import of any of
them by the program (or by torch code the program runs) puts all of them back, unchanged and not run
again, and registers their safe globals again, as importing them on a GPU would have.
"""
from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import sys
from typing import Any, Callable

TARGET = "torch.distributed.tensor"  # what the program must import for the side effects above

_state: dict[str, Any] = {"recording": False, "held": False, "baseline": None}
_edges: dict[str, set[str]] = {}  # importer -> imported (absolute names), recorded in the window
_registered: list[tuple[str, list[Any]]] = []  # (caller module, globals) of add_safe_globals in the window
_hidden: dict[str, Any] = {}  # name -> module, out of sys.modules until the program imports one of them
_withdrawn: list[list[Any]] = []  # safe globals taken back, registered again on restore
_originals: dict[str, Callable] = {}


def begin() -> None:
    """Start recording (a no-op when already recording or when the simulation started before)."""
    if _state["recording"] or _state["baseline"] is not None:
        return
    import torch.serialization

    _state["baseline"] = set(sys.modules)
    _state["recording"] = True
    _originals["import"] = builtins.__import__
    _originals["add_safe_globals"] = torch.serialization.add_safe_globals
    builtins.__import__ = _recording_import
    torch.serialization.add_safe_globals = _recording_add_safe_globals


def hold() -> None:
    """Make `finish()` wait for `release()`: the warm template imports more after the simulation starts."""
    _state["held"] = True


def release() -> None:
    """End `hold()` and hide what the simulation imported (the warm template's warm-up is over)."""
    _state["held"] = False
    finish()


def finish() -> None:
    """Stop recording and hide the modules that reach torch.distributed.tensor (see the module's doc).
    Called again after the program (here: the warm template's warm-up) imported them, it hides them again."""
    if _state["held"] or _state["baseline"] is None:
        return
    import torch.serialization

    if _state["recording"]:
        builtins.__import__ = _originals.pop("import")
        torch.serialization.add_safe_globals = _originals.pop("add_safe_globals")
        _state["recording"] = False
    if _hidden:
        return
    hidden = reaching(_edges, {n for n in sys.modules if n.startswith("torch.") and n not in _state["baseline"]})
    if not hidden:
        return
    withdrawn = [g for caller, g in _registered if caller in hidden]
    if withdrawn:
        keep = [g for g in torch.serialization.get_safe_globals() if not any(_contains(w, g) for w in withdrawn)]
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(keep)
    _withdrawn[:] = withdrawn
    for name in hidden:
        _hidden[name] = sys.modules.pop(name)
    sys.meta_path.insert(0, _Restore())


def reaching(edges: dict[str, set[str]], candidates: set[str], target: str = TARGET) -> set[str]:
    """The candidates whose import imports `target`: they are `target` or below it, or an import chain
    (edges, parent packages included: importing a.b imports a) leads from them to such a module."""
    nodes = set(candidates) | set(edges) | {n for targets in edges.values() for n in targets}
    imported_by: dict[str, set[str]] = {}
    for importer in nodes:
        parent = importer.rpartition(".")[0]
        for name in edges.get(importer, set()) | ({parent} if parent else set()):
            imported_by.setdefault(name, set()).add(importer)
    seen = {n for n in nodes if n == target or n.startswith(target + ".")}
    todo = list(seen)
    while todo:
        for importer in imported_by.get(todo.pop(), ()):
            if importer not in seen:
                seen.add(importer)
                todo.append(importer)
    return seen & candidates


def hidden() -> set[str]:
    """The names now out of sys.modules (for tests and reports)."""
    return set(_hidden)


def _contains(registered: list[Any], entry: Any) -> bool:
    return any(entry is g or entry == g for g in registered)


def _recording_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
    module = _originals["import"](name, globals, locals, fromlist, level)
    importer = (globals or {}).get("__name__")
    if importer and getattr(getattr(sys.modules.get(importer), "__spec__", None), "_initializing", False):
        # an import while the importer's own module runs: one it makes whenever it is imported (a function's
        # import, made only when called, is not)
        try:
            absolute = importlib.util.resolve_name("." * level + name, (globals or {}).get("__package__")) \
                if level else name
        except (ImportError, ValueError):
            return module
        targets = _edges.setdefault(importer, set())
        targets.add(absolute)
        targets.update(f"{absolute}.{item}" for item in fromlist or () if isinstance(item, str) and item != "*")
    return module


def _recording_add_safe_globals(safe_globals: list[Any]) -> None:
    caller = sys._getframe(1).f_globals.get("__name__", "")
    _registered.append((caller, list(safe_globals)))
    _originals["add_safe_globals"](safe_globals)


def _restore() -> None:
    """Put every hidden module back and register its safe globals again (the program imported one)."""
    for finder in [f for f in sys.meta_path if isinstance(f, _Restore)]:
        sys.meta_path.remove(finder)
    modules = dict(_hidden)
    _hidden.clear()
    for name, module in modules.items():
        sys.modules.setdefault(name, module)
    if _withdrawn:
        import torch.serialization

        for registered in _withdrawn:
            torch.serialization.add_safe_globals(registered)
        _withdrawn.clear()


class _Restore:
    """A meta-path finder for the hidden names: their module, already loaded, not a fresh copy."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        module = _hidden.get(name)
        if module is None:
            return None
        original = getattr(module, "__spec__", None)
        spec = importlib.machinery.ModuleSpec(name, _Loaded(module, original),
                                              origin=getattr(original, "origin", None),
                                              is_package=hasattr(module, "__path__"))
        if hasattr(module, "__path__"):
            spec.submodule_search_locations = list(module.__path__)
        return spec

    def invalidate_caches(self) -> None:
        pass


class _Loaded:
    """Loader that returns the already-loaded module (run once, while the simulation started)."""

    def __init__(self, module: Any, spec: Any) -> None:
        self.module, self.spec = module, spec

    def create_module(self, spec: Any) -> Any:
        _hidden.pop(spec.name, None)  # the import machinery puts this one back itself
        _restore()
        return self.module

    def exec_module(self, module: Any) -> None:
        if self.spec is not None:
            module.__spec__ = self.spec  # the import machinery set ours; the module keeps its own

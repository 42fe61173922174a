"""The layer contract: the code's layers form a DAG, and no module imports from a layer above its own.

Every import counts, including those inside functions (a lazy import is still a dependency). A new
module must be placed in a layer here, so the drawing in docs/architecture.md stays true.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("simgpu", "realgpu", "conformance", "benchmarks")

# bottom to top: a module may import its own layer and those below. A name ending in ".*" is a
# package with everything in it; any other name is one module (so a new module must be placed here).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("facts and devices", ("simgpu.collective_facts", "realgpu", "realgpu.leases", "realgpu.environment",
                           "simgpu.torch_support")),
    ("simulator", ("simgpu.settings", "simgpu.nccl_rules", "simgpu.strict", "simgpu.issue_order", "simgpu.faults",
                   "simgpu.p2p_pairs",
                   "simgpu.p2p_check", "simgpu.gloo_listener", "simgpu.collective_profiling", "simgpu.collective_echo", "simgpu.backend", "simgpu.comm_log", "simgpu.cost_model", "simgpu.cuda_sim",
                   "simgpu.cuda_sim.*")),
    ("ranks", ("simgpu", "simgpu.protocol", "simgpu.pool", "simgpu.rank", "simgpu.outcomes", "simgpu.tracebacks",
               "simgpu.attach", "simgpu.in_step", "simgpu.selection")),
    ("front ends", ("simgpu.launcher", "simgpu.host_malloc", "simgpu.reaper", "simgpu.template", "simgpu.__main__", "simgpu._boot", "simgpu._boot.*",
                    "simgpu.testing")),
    ("conformance suite", ("conformance", "conformance.*")),
    ("benchmarks and calibration", ("realgpu.bench", "realgpu.bench_ops", "realgpu.bench_report",
                                    "realgpu.bench_compare", "realgpu.calibration", "benchmarks", "benchmarks.*")),
]


def layer_of(module: str) -> int | None:
    """The layer that names the module, or the package it is in (None: in no layer)."""
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            if module == name or (name.endswith(".*") and module.startswith(name[:-1])):
                return index
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    base = ROOT / name.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def project_imports() -> dict[str, set[str]]:
    """module -> the project modules it imports (from a.b import c counts as a.b.c when c is a module)."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            targets = graph.setdefault(_module_name(path), set())
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                             for a in node.names]
                else:
                    continue
                targets.update(n for n in names if n.split(".")[0] in PACKAGES)
    return graph


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in project_imports() if layer_of(m) is None)
    assert not unplaced, f"place these modules in a layer of tests/test_layers.py: {unplaced}"


def test_no_module_imports_from_a_layer_above() -> None:
    upward = []
    for module, targets in project_imports().items():
        for target in targets:
            mine, theirs = layer_of(module), layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{module} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")
    assert not upward, "imports against the layer order:\n" + "\n".join(sorted(upward))


def test_the_contract_catches_an_upward_import() -> None:
    assert layer_of("simgpu.pool") < layer_of("conformance.plugin")  # so simgpu.pool -> conformance would fail
    assert layer_of("simgpu.cost_model") < layer_of("realgpu.calibration")
    assert layer_of("simgpu.some_new_module") is None  # unplaced, so test_every_module_has_a_layer fails

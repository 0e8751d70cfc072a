"""The shape of the package: layers that import downward only, no circles, private parts kept.

The import graph is read from the source (every ``import`` statement, those
inside functions included), so a lazy import cannot hide a circle. The layers
are the ones the README's Layout section describes; a package may import its
own layer or the ones below, never one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "reliacal"

# Bottom to top. A unit is a top-level module or package of reliacal/.
LAYERS = [
    {"_validation", "_docstrings", "_init_arguments", "_device", "_data", "_version"},
    # persistence reads estimators through their own hooks only (SaveMixin), so it sits
    # low enough for every estimator to inherit SaveMixin.
    {"metrics", "persistence"},
    {"plot", "backbones", "export", "io"},
    {"training"},
    {"calibrators"},
    {"finetune", "wrap"},
    {"nn", "datasets"},
    {"demo", "cli"},
]
LAYER_OF = {unit: level for level, units in enumerate(LAYERS) for unit in units}
MAX_PRIVATE_TOP_MODULES = 6


def _modules() -> dict[str, Path]:
    """Dotted name of every module of reliacal (a package by its ``__init__``)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imported(module: str, node: ast.AST) -> set[str]:
    """The reliacal modules one import statement of ``module`` reaches."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        assert node.level == 0, f"{module}: relative import (ruff's TID252 forbids them)"
        if not (node.module or "").startswith("reliacal"):
            return set()
        # `from package import submodule` reaches the submodule; `from module import name`
        # the module.
        names = [
            f"{node.module}.{alias.name}"
            if f"{node.module}.{alias.name}" in MODULES
            else node.module
            for alias in node.names
        ]
    reached = set()
    for name in names:
        parts = name.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        if parts and parts[0] == "reliacal":
            reached.add(".".join(parts))
    return reached


def _import_edges() -> dict[str, set[str]]:
    edges = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets |= _imported(module, node)
        targets.discard(module)
        edges[module] = targets
    return edges


EDGES = _import_edges()


def _unit(module: str) -> str:
    """The top-level module or package of reliacal that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "reliacal"


def _unit_edges() -> dict[str, set[str]]:
    units: dict[str, set[str]] = {}
    for module, targets in EDGES.items():
        if module == "reliacal":  # the root loads its public names lazily, by name
            continue
        source = _unit(module)
        units.setdefault(source, set())
        units[source] |= {_unit(target) for target in targets} - {source}
    return units


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph, as a path that returns to its start, or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_top_level_module_has_a_layer():
    units = {_unit(module) for module in MODULES} - {"reliacal"}
    assert units <= set(LAYER_OF), f"give these a layer: {sorted(units - set(LAYER_OF))}"


def test_the_packages_import_one_another_without_a_circle():
    cycle = _find_cycle(_unit_edges())
    assert cycle is None, " -> ".join(cycle)


def test_the_modules_import_one_another_without_a_circle():
    # A package may import its own submodules (its __init__ re-exports them).
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in EDGES.items()}
    cycle = _find_cycle(edges)
    assert cycle is None, " -> ".join(cycle)


def test_the_metric_modules_import_one_another_without_a_circle():
    # Pure NumPy definitions below, the metric table, the states, Dask at the public face.
    inside = {
        module: {target for target in targets if target.startswith("reliacal.metrics.")}
        for module, targets in EDGES.items()
        if module.startswith("reliacal.metrics.")
    }
    cycle = _find_cycle(inside)
    assert cycle is None, " -> ".join(cycle)


def test_only_the_public_face_of_the_metrics_imports_their_dask_module():
    # The definitions stay pure NumPy: Dask is accepted once, by the public functions
    # (metrics/_public.py) and the report's states, not by each metric's module.
    importers = sorted(
        module for module, targets in EDGES.items() if "reliacal.metrics._dask" in targets
    )
    assert importers == ["reliacal.metrics._public", "reliacal.metrics._report"]


@pytest.mark.parametrize("unit", sorted(set(LAYER_OF) & {_unit(m) for m in MODULES}))
def test_no_import_runs_upward(unit):
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in EDGES.items()
        if _unit(module) == unit and module != "reliacal"
        for target in targets
        if LAYER_OF.get(_unit(target), len(LAYERS)) > LAYER_OF[unit]
    )
    assert upward == []


def test_no_module_reaches_into_another_package_private_modules():
    intrusions = []
    for module, targets in EDGES.items():
        for target in targets:
            parts = target.split(".")
            # reliacal.<package>.<private module>: private to <package>.
            for depth in range(2, len(parts)):
                owner = ".".join(parts[:depth])
                if parts[depth].startswith("_") and not (
                    module == owner or module.startswith(owner + ".")
                ):
                    intrusions.append(f"{module} -> {target}")
                    break
    assert sorted(intrusions) == []


def test_the_top_floor_has_few_private_modules():
    private = sorted(
        path.stem if path.is_file() else path.name
        for path in PACKAGE.iterdir()
        if path.name.startswith("_")
        and path.name != "__init__.py"
        and path.name != "__pycache__"
        and (path.suffix == ".py" or (path / "__init__.py").exists())
    )
    assert len(private) <= MAX_PRIVATE_TOP_MODULES, private


def test_the_checker_finds_a_circle_and_an_upward_import():
    # The checks above can fail: a made-up graph with a circle is caught.
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
    assert LAYER_OF["metrics"] < LAYER_OF["calibrators"]

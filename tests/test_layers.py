"""The packages of `launcher` import each other in one direction only: no cycle, at any depth.

import-linter's layers contract (pyproject.toml) checks the order; this test checks what a layers
contract cannot name, that no two packages (or modules at the top, such as `engine_specs`) reach
each other through any chain of imports, and that the contract has no exceptions.
"""

from __future__ import annotations

import tomllib
from collections import defaultdict
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def _unit(module: str) -> str:
    """`launcher.server.app` -> `launcher.server`; `launcher.engine_specs` stays itself."""
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph("launcher")
    edges: dict[str, set[str]] = defaultdict(set)
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            source, target = _unit(module), _unit(imported)
            if source != target and target.startswith("launcher."):
                edges[source].add(target)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_packages() -> None:
    edges = _package_graph()
    assert edges["launcher.cli"], "the graph was built"  # the CLI imports the rest
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_layers_contract_has_no_exceptions() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layered = [c for c in config["contracts"] if c["type"] == "layers"]
    assert len(layered) == 1 and "ignore_imports" not in layered[0]
    assert not any("ignore_imports" in c for c in config["contracts"])
    # Every package of launcher sits in a layer, so a new one cannot slip past the order.
    named = {part.strip() for layer in layered[0]["layers"] for part in layer.split("|")}
    packages = {f"launcher.{p.name}" for p in (ROOT / "launcher").iterdir() if (p / "__init__.py").exists()}
    packages |= {f"launcher.{p.stem}" for p in (ROOT / "launcher").glob("*.py") if not p.stem.startswith("__")}
    assert packages <= named, f"not in any layer: {sorted(packages - named)}"

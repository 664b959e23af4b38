"""Every package the launcher imports is one it declares: a plain `pip install launcher` (and the
frozen app, which bundles what that installs) must not lack a module that only the dev extras
happened to bring. Engine code may also use its engine's extra."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE_EXTRAS = {"llamacpp": "llamacpp", "mlx": "mlx", "exllamav2": "exllamav2", "exllamav3": "exllamav3"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _with_requirements(names: set[str]) -> set[str]:
    """The distributions and what each of them requires directly (installed or not)."""
    out = set(names)
    for name in names:
        try:
            out |= {_name(r) for r in importlib.metadata.requires(name) or () if "extra ==" not in r}
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def _imports(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"launcher", "__future__"}


def test_every_imported_package_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _with_requirements({_name(r) for r in project["dependencies"]})
    extras = {
        extra: core | _with_requirements({_name(r) for r in project["optional-dependencies"][extra]})
        for extra in set(ENGINE_EXTRAS.values())
    }
    distributions = importlib.metadata.packages_distributions()
    missing: list[str] = []
    for path in sorted((ROOT / "launcher").rglob("*.py")):
        parts = path.relative_to(ROOT / "launcher").parts
        engine = parts[1] if parts[0] == "engines" and len(parts) > 2 else None
        allowed = extras.get(ENGINE_EXTRAS.get(engine or "", ""), core)
        if engine and engine.startswith("exllama"):  # exllama_common serves both ExLlama extras
            allowed = extras["exllamav2"] | extras["exllamav3"]
        for module in _imports(path):
            owners = {d.lower().replace("_", "-") for d in distributions.get(module, ())}
            if not owners:
                continue  # not installed here (another OS's runtime): its engine's tests cover it
            if not owners & allowed:
                missing.append(f"{path.relative_to(ROOT)} imports {module} ({', '.join(sorted(owners))})")
    assert not missing, "imported but not declared in pyproject.toml:\n" + "\n".join(missing)

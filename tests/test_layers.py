"""The layers import one way: schemas ← clgate (core, engine, store) ← workers ← service; the CLI composes.

Inside the pure core: metrics ← fmeca ← policy ← reports ← gate (policy rules judge the FMECA worksheet).

Every ``import`` in every module is read (top level and inside functions alike), so an arrow that runs
back up fails here even when it is a lazy import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Repository folder → the import name it installs as (setup.py's package-dir mapping).
ROOTS = {
    "clgate": "clgate",
    "schemas": "clgate.schemas",
    "workers": "clgate.workers",
    "service": "clgate.service",
}

LAYERS_ABOVE = {
    "clgate.schemas": ("clgate.",),  # the contract imports nothing of clgate but itself
    "clgate.metrics": (
        "clgate.policy",
        "clgate.fmeca",
        "clgate.reports",
        "clgate.engine",
        "clgate.store",
        "clgate.workers",
        "clgate.service",
        "clgate.cli",
        "clgate.gate",
    ),
    "clgate.policy": (
        "clgate.reports",
        "clgate.engine",
        "clgate.store",
        "clgate.workers",
        "clgate.service",
        "clgate.cli",
        "clgate.gate",
    ),
    "clgate.fmeca": (
        "clgate.policy",
        "clgate.reports",
        "clgate.engine",
        "clgate.store",
        "clgate.workers",
        "clgate.service",
        "clgate.cli",
        "clgate.gate",
    ),
    "clgate.reports": ("clgate.engine", "clgate.store", "clgate.workers", "clgate.service", "clgate.cli"),
    "clgate.gate": ("clgate.engine", "clgate.store", "clgate.workers", "clgate.service", "clgate.cli"),
    "clgate.engine": ("clgate.store", "clgate.workers", "clgate.service", "clgate.cli"),
    "clgate.store": ("clgate.engine", "clgate.workers", "clgate.service", "clgate.cli"),
    "clgate.workers": ("clgate.service", "clgate.cli"),
    "clgate.service": ("clgate.cli",),
}
# The pure core imports no framework.
PURE = ("clgate.metrics", "clgate.policy", "clgate.fmeca", "clgate.schemas")
FRAMEWORKS = ("torch", "fastapi", "starlette", "celery", "kombu", "sqlalchemy", "alembic", "redis", "sklearn")


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    parts[0] = ROOTS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return found


def _modules() -> list[tuple[str, Path]]:
    out = []
    for folder in ROOTS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if "migrations" not in path.parts:
                out.append((_module_name(path), path))
    return out


def _layer(module: str) -> str | None:
    matches = [layer for layer in LAYERS_ABOVE if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


def _violations(module: str, path: Path) -> list[str]:
    layer = _layer(module)
    problems = []
    for line, name in _imports(path, module):
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}:{line}"
        if layer is not None:
            for above in LAYERS_ABOVE[layer]:
                prefix = above if above.endswith(".") else above + "."
                if (name == above or name.startswith(prefix)) and not name.startswith(layer):
                    problems.append(f"{where}: {module} imports {name} (a layer above it)")
        if module.startswith(PURE) and name.split(".")[0] in FRAMEWORKS:
            problems.append(f"{where}: the pure core module {module} imports the framework {name}")
        if (
            name.startswith("clgate.cli")
            and not module.startswith("clgate.cli")
            and module != "clgate.__main__"
        ):
            problems.append(f"{where}: {module} imports the CLI (the composition root)")
        if name.split(".")[0] in ("schemas", "workers", "service"):
            problems.append(f"{where}: {module} imports {name} outside the clgate import root")
    return problems


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_imports_run_one_way(module, path):
    assert _violations(module, path) == []


def test_the_check_catches_an_arrow_that_runs_back_up(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from clgate.service.app import create_app\n    import torch\n")
    problems = _violations("clgate.metrics.bad", bad)
    assert any("clgate.service.app" in p for p in problems)
    assert any("framework torch" in p for p in problems)

"""The layers import one way: schemas ← clgate (core, engine, store) ← workers ← service; the CLI composes.

Inside the pure core: metrics ← fmeca ← policy ← reports ← gate (policy rules judge the FMECA worksheet).

Every ``import`` in every module is read (top level and inside functions alike), so an arrow that runs
back up fails here even when it is a lazy import. Every module of the package has a row (a module that no
row covers fails), the package root included: the root may import only :mod:`clgate._version` and the
modules of its lazy public re-exports (``clgate.LAZY_EXPORTS``), and a module that imports the root is
held to those edges too (importing the root may load them). No module imports itself through others
(no import cycle), and the contract (``clgate.schemas``) does no file I/O.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import clgate

REPO = Path(__file__).resolve().parents[1]

# Repository folder → the import name it installs as (setup.py's package-dir mapping).
ROOTS = {
    "clgate": "clgate",
    "schemas": "clgate.schemas",
    "workers": "clgate.workers",
    "service": "clgate.service",
    "examples": "clgate.examples",
}
ROOT = "clgate"
# The root's only edges: the version, and the modules behind its lazy re-exports (`clgate.Recorder`).
ROOT_EDGES = ("clgate._version", *sorted(set(clgate.LAZY_EXPORTS.values())))

ABOVE_THE_CORE = ("clgate.engine", "clgate.store", "clgate.workers", "clgate.service", "clgate.cli")
# Layer (a module and the modules under it) → the imports it must not make. A module is in the longest
# layer that names it or a package above it; the root, ``clgate``, is a row of its own (checked apart).
LAYERS_ABOVE = {
    "clgate._version": ("clgate.",),  # the version imports nothing
    "clgate.fmt": ("clgate.",),  # number formatting, used by every renderer: imports nothing of clgate
    # build provenance read from CI variables (used by the CLI and the reports): the contract and nothing else
    "clgate.provenance": (
        "clgate.metrics",
        "clgate.policy",
        "clgate.fmeca",
        "clgate.reports",
        "clgate.gate",
        "clgate.log_import",
        "clgate.documents",
        "clgate.presets",
        *ABOVE_THE_CORE,
    ),
    # the shipped policies by name (preset:NAME): the contract's errors and nothing else
    "clgate.presets": (
        "clgate.metrics",
        "clgate.policy",
        "clgate.fmeca",
        "clgate.reports",
        "clgate.gate",
        "clgate.log_import",
        "clgate.documents",
        *ABOVE_THE_CORE,
    ),
    "clgate.schemas": ("clgate.",),  # the contract imports nothing of clgate but itself
    # documents as files and text (YAML/JSON job specs, evaluation logs): the contract and nothing else
    "clgate.documents": (
        "clgate.metrics",
        "clgate.policy",
        "clgate.fmeca",
        "clgate.reports",
        "clgate.gate",
        "clgate.log_import",
        *ABOVE_THE_CORE,
    ),
    # evaluation-log files (JSON, JSON Lines, .npz) straight into arrays: the contract, documents and metrics
    "clgate.logfile": (
        "clgate.policy",
        "clgate.fmeca",
        "clgate.reports",
        "clgate.gate",
        "clgate.log_import",
        *ABOVE_THE_CORE,
    ),
    # a results table → an evaluation log: the contract and nothing else
    "clgate.log_import": (
        "clgate.metrics",
        "clgate.policy",
        "clgate.fmeca",
        "clgate.reports",
        "clgate.gate",
        *ABOVE_THE_CORE,
    ),
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
    # the service's Python client: the contract over HTTP (and the policy loader), no server side
    "clgate.client": ("clgate.engine", "clgate.store", "clgate.workers", "clgate.service", "clgate.cli"),
    # outward bridges of a verdict (MLflow, webhook delivery from the store's outbox): below the workers
    "clgate.integrations": ("clgate.engine", "clgate.workers", "clgate.service", "clgate.cli"),
    "clgate.workers": ("clgate.service", "clgate.cli"),
    "clgate.service": ("clgate.cli",),
    "clgate.cli": (),  # the composition root imports any layer
    "clgate.__main__": (),  # ``python -m clgate``: the CLI
    "clgate.examples": (),  # examples are users' code: the public API of any layer
}
# The pure core imports no framework.
PURE = (
    "clgate.metrics",
    "clgate.policy",
    "clgate.fmeca",
    "clgate.schemas",
    "clgate.fmt",
    "clgate.log_import",
    "clgate._version",
    "clgate.provenance",
    "clgate.presets",
    "clgate.logfile",
    "clgate.gate",
    "clgate.reports",
)
# The contract holds pydantic models only: reading and writing files is clgate.documents' job.
FILE_IO = ("yaml", "pathlib", "io", "shutil", "tempfile")
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
            if name != ROOT:  # `from clgate import x` imports x, not the root's lazy names
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
    if module == ROOT:
        return ROOT
    matches = [layer for layer in LAYERS_ABOVE if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


def _through_the_root(imports: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Add the lazy edge behind each name taken from the root (``from clgate import Recorder``).

    ``import clgate`` may reach any of them later (``clgate.Recorder``): it counts as all of them.
    """
    found = list(imports)
    for line, name in imports:
        if name == ROOT:
            found += [(line, edge) for edge in clgate.LAZY_EXPORTS.values()]
        elif name.startswith(ROOT + ".") and name[len(ROOT) + 1 :] in clgate.LAZY_EXPORTS:
            found.append((line, clgate.LAZY_EXPORTS[name[len(ROOT) + 1 :]]))
    return found


def _violations(module: str, path: Path) -> list[str]:
    layer = _layer(module)
    problems = []
    imports = _imports(path, module)
    if layer != ROOT:
        imports = _through_the_root(imports)
    for line, name in imports:
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}:{line}"
        if name == f"{ROOT}.__version__":
            problems.append(f"{where}: {module} takes the version from the root; import clgate._version")
        if layer == ROOT:
            if name.startswith(ROOT + ".") and not name.startswith(ROOT_EDGES):
                problems.append(
                    f"{where}: the package root imports {name} (allowed: {', '.join(ROOT_EDGES)})"
                )
        elif layer is not None:
            for above in LAYERS_ABOVE[layer]:
                prefix = above if above.endswith(".") else above + "."
                if (name == above or name.startswith(prefix)) and not name.startswith(layer):
                    problems.append(f"{where}: {module} imports {name} (a layer above it)")
        if module.startswith("clgate.schemas") and name.split(".")[0] in FILE_IO:
            problems.append(
                f"{where}: the contract module {module} imports {name} (file I/O: clgate.documents)"
            )
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
    assert _layer(module) is not None, f"{module}: no row of LAYERS_ABOVE covers it; add one"
    assert _violations(module, path) == []


def test_the_root_imports_only_its_named_edges():
    """The root's lazy re-exports resolve, and the root module's own imports stay within ROOT_EDGES."""
    root = REPO / "clgate" / "__init__.py"
    assert _violations(ROOT, root) == []
    for name, module in clgate.LAZY_EXPORTS.items():
        assert module in ROOT_EDGES and name in clgate.__all__


def test_importing_the_root_counts_as_its_lazy_edges(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from clgate import Recorder\nfrom clgate import __version__\n")
    problems = _violations("clgate.policy.bad", bad)
    assert any("imports clgate.engine.recorder" in p for p in problems)
    assert any("import clgate._version" in p for p in problems)
    good = tmp_path / "good.py"
    good.write_text("from clgate._version import __version__\nfrom clgate import metrics\n")
    assert _violations("clgate.policy.good", good) == []


def test_the_check_catches_an_arrow_that_runs_back_up(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from clgate.service.app import create_app\n    import torch\n")
    problems = _violations("clgate.metrics.bad", bad)
    assert any("clgate.service.app" in p for p in problems)
    assert any("framework torch" in p for p in problems)
    reader = tmp_path / "reader.py"
    reader.write_text("def load():\n    import yaml\n")
    assert any("file I/O" in p for p in _violations("clgate.schemas.reader", reader))


def _import_graph(modules: list[tuple[str, Path]]) -> dict[str, set[str]]:
    """Module → the package modules it imports (top level or inside functions), its own packages left out.

    ``from clgate.metrics import steps`` inside ``clgate.metrics.compute`` imports a sibling through
    the package; Python resolves that while the package is still initialising, so an edge to an
    enclosing package is no cycle.
    """
    names = {name for name, _ in modules}
    graph: dict[str, set[str]] = {}
    for module, path in modules:
        edges = set()
        for _, name in _imports(path, module):
            while name and name not in names:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                edges.add(name)
        graph[module] = edges
    return graph


def test_no_module_imports_itself_through_others():
    """No import cycle (``engine.data`` ↔ ``engine.samples`` was one): the graph sorts."""
    try:
        graphlib.TopologicalSorter(_import_graph(_modules())).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' → '.join(exc.args[1])}")


def test_the_cycle_check_sees_an_inner_import(tmp_path):
    (tmp_path / "a.py").write_text("from clgate.engine.b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    from clgate.engine.a import g\n")
    graph = _import_graph([("clgate.engine.a", tmp_path / "a.py"), ("clgate.engine.b", tmp_path / "b.py")])
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()

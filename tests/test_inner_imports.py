"""An import of a clgate module inside a function says why it is not at the top of the module.

Imports inside functions hide the dependency graph (the layer test reads them, a reader may not) and
repeat work; they are kept only where a heavy optional dependency (torch, scikit-learn, FastAPI, Celery,
SQLAlchemy, matplotlib …) must stay unloaded for code that imports without it, where ``clgate --help``
must stay fast (the CLI's commands), or where a real import cycle needs it. Each such import, or the
run of imports it belongs to, carries a comment ``# lazy: <which of those, and what>`` above it in that
run (or in the comment right before the run), or at the end of its line. This test lists the internal imports
inside functions and fails on one without that comment.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("clgate", "schemas", "workers", "service", "examples")
REASON = re.compile(r"#\s*lazy:\s*\S")


def _blocks(body: list[ast.stmt]) -> list[list[ast.Import | ast.ImportFrom]]:
    """Runs of consecutive import statements in one statement list."""
    blocks: list[list[ast.Import | ast.ImportFrom]] = []
    run: list[ast.Import | ast.ImportFrom] = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            run.append(stmt)
            continue
        if run:
            blocks.append(run)
            run = []
    if run:
        blocks.append(run)
    return blocks


def _internal(stmt: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(stmt, ast.ImportFrom):
        return bool(stmt.level) or (stmt.module or "").split(".")[0] == "clgate"
    return any(alias.name.split(".")[0] == "clgate" for alias in stmt.names)


def unexplained(path: Path) -> list[str]:
    """``file:line: import`` for each internal import inside a function that has no ``# lazy:`` reason."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines), str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bodies = [
            getattr(node, field)
            for node in ast.walk(fn)
            for field in ("body", "orelse", "finalbody")
            if isinstance(getattr(node, field, None), list)
        ]
        bodies += [h.body for node in ast.walk(fn) if isinstance(node, ast.Try) for h in node.handlers]
        for body in bodies:
            for block in _blocks(body):
                start = block[0].lineno - 1  # the comment lines right above the block, then the block
                while start > 0 and lines[start - 1].strip().startswith("#"):
                    start -= 1
                for stmt in block:
                    above = lines[start : stmt.lineno]  # a reason above it in its block, or on its line
                    if _internal(stmt) and not any(REASON.search(line) for line in above):
                        found.append(f"{where}:{stmt.lineno}: {lines[stmt.lineno - 1].strip()}")
    return sorted(set(found))


def test_every_internal_import_inside_a_function_says_why():
    problems = [
        p
        for folder in FOLDERS
        for path in sorted((REPO / folder).rglob("*.py"))
        if "migrations" not in path.parts
        for p in unexplained(path)
    ]
    assert problems == [], (
        "internal imports inside functions without a '# lazy: <reason>' comment:\n" + "\n".join(problems)
    )


def test_the_check_tells_a_reason_from_none(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text(
        "def a():\n"
        "    from clgate.metrics import compute_metrics\n"
        "def b():\n"
        "    # lazy: torch — the engine is an optional extra,\n"
        "    # and this module imports without it\n"
        "    from clgate.engine import run_job\n"
        "    from clgate.engine.data import load_data\n"
        "def c():\n"
        "    import json\n"
        "    from clgate.gate import gate_logs  # lazy: cycle — clgate.gate imports this module\n"
        "def d():\n"
        "    try:\n"
        "        pass\n"
        "    except Exception:\n"
        "        from .x import y\n",
        encoding="utf-8",
    )
    found = {p.split(": ", 1)[1] for p in unexplained(path)}
    assert found == {"from clgate.metrics import compute_metrics", "from .x import y"}

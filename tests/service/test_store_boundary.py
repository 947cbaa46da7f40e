"""The API and the CLI hold no SQL of their own: every query is a :mod:`clgate.store` function.

The scan reads the source of ``service/`` and ``clgate/cli/`` (as the full-stack-fastapi-template's
routes call ``crud.py``): no SQL statement builder (``select``, ``insert``, ``update``, ``delete``,
``text``, ``exists``, ``func``), no query run on a session, no SQLAlchemy import beyond its error
types and the ``Session`` type.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("service", "clgate/cli")
BUILDERS = {"select", "insert", "update", "delete", "text", "exists", "func", "union", "literal_column"}
RUNS = {"query", "execute", "scalar", "scalars", "scalar_one", "scalar_one_or_none"}
SESSIONS = {"session", "s", "db", "conn", "connection", "sessions"}
ALLOWED_IMPORTS = {"sqlalchemy.exc", "sqlalchemy.orm"}
ALLOWED_ORM_NAMES = {"Session", "sessionmaker"}


def _problems(tree: ast.AST) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            names = {a.name for a in node.names}
            if node.module not in ALLOWED_IMPORTS or (
                node.module == "sqlalchemy.orm" and names - ALLOWED_ORM_NAMES
            ):
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(sorted(names))}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "sqlalchemy" and alias.name not in ALLOWED_IMPORTS:
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in BUILDERS:
                found.append(f"line {node.lineno}: {f.id}(…)")
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if f.attr in BUILDERS and f.value.id in {"sa", "sqlalchemy"}:
                    found.append(f"line {node.lineno}: {f.value.id}.{f.attr}(…)")
                if f.attr in RUNS and f.value.id in SESSIONS:
                    found.append(f"line {node.lineno}: {f.value.id}.{f.attr}(…)")
    return found


def _sources() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (REPO / folder).rglob("*.py"))


def test_the_scan_sees_the_api_and_the_cli():
    names = {p.relative_to(REPO).as_posix() for p in _sources()}
    assert {"service/deps.py", "service/routers/jobs.py", "clgate/cli/service_cmd.py"} <= names


@pytest.mark.parametrize(
    "source",
    [
        "from sqlalchemy import select\n",
        "import sqlalchemy as sa\nsa.select(X)\n",
        "rows = session.execute(q)\n",
        "first = s.scalar(q)\n",
        "session.query(Job).all()\n",
        "from sqlalchemy.orm import selectinload\n",
        "q = update(Job).values(state='x')\n",
        "text('DELETE FROM jobs')\n",
    ],
)
def test_the_scan_catches_sql(source):
    assert _problems(ast.parse(source))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_sql_outside_the_store(path):
    problems = _problems(ast.parse(path.read_text(encoding="utf-8")))
    assert not problems, f"{path.relative_to(REPO)}: queries belong in clgate.store: {problems}"


def test_the_cli_offers_the_roles_of_the_vocabulary():
    from typer.testing import CliRunner

    from clgate.cli import app
    from clgate.schemas.vocab import ROLES

    result = CliRunner().invoke(app, ["keys", "create", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    offered = " ".join(result.output.split())
    assert f"{', '.join(ROLES[:-1])} or {ROLES[-1]}." in offered

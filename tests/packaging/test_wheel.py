"""The built wheel: one import root (``clgate``) and every data file the installed package needs."""

from __future__ import annotations

import zipfile
from pathlib import PurePosixPath


def _names(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_only_top_level_import_name_is_clgate(wheel):
    names = _names(wheel)
    roots = {PurePosixPath(n).parts[0] for n in names if not PurePosixPath(n).parts[0].endswith(".dist-info")}
    assert roots == {"clgate"}, roots
    top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    if top_level:  # setuptools writes it; it must agree
        with zipfile.ZipFile(wheel) as archive:
            assert archive.read(top_level[0]).decode().split() == ["clgate"]


def test_the_layers_and_their_data_are_inside(wheel):
    names = set(_names(wheel))

    def has(prefix: str, suffix: str = "") -> bool:
        return any(n.startswith(prefix) and n.endswith(suffix) for n in names)

    for package in ("clgate/schemas/", "clgate/workers/", "clgate/service/", "clgate/store/"):
        assert f"{package}__init__.py" in names, package
    assert has("clgate/store/migrations/", ".py"), "the Alembic migrations"
    assert has("clgate/store/migrations/versions/", ".py"), "the Alembic revisions"
    assert "clgate/store/alembic.ini" in names and "clgate/store/migrations/env.py" in names
    for example in (
        "jobs/digits-er.yaml",
        "jobs/digits-finetune.yaml",
        "policies/digits-release.yaml",
        "logs/spec-example.json",
    ):
        assert f"clgate/examples/{example}" in names, example
    assert "clgate/reports/templates/report.html.j2" in names, "the report template"
    assert not has("tests/") and not has("clgate/tests/")


def test_the_console_script_is_declared_and_builtin_strategies_are_not(wheel):
    """Built-in strategies are registered once, in code; the entry-point group is for third parties."""
    with zipfile.ZipFile(wheel) as archive:
        entry_points = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        text = archive.read(entry_points).decode()
    assert "clgate = clgate.cli:main" in text
    assert "clgate.engine.strategies:" not in text

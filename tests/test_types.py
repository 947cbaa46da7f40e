"""mypy (with the pydantic plugin, configured in pyproject.toml) checks the whole package.

Every module under ``clgate`` is checked; the modules still allowed to fail are listed in
:data:`NOT_YET_CLEAN`, a list that can only shrink: the test fails on an error in a module that is not
listed, and on a listed module that has become clean (its entry must then go, so that it stays clean).

The layer folders install under one import root (``schemas/`` is ``clgate.schemas``) through setuptools'
package-dir mapping, which mypy cannot follow in an editable install; the test checks the modules by
their real names through a tree of links that has that layout.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("schemas", "workers", "service", "examples")

# Modules that still have type errors. Remove an entry when its module is clean; never add one.
# Empty: every module is clean, and a new error fails the test.
NOT_YET_CLEAN: frozenset[str] = frozenset()

_ERROR = re.compile(r"^(?P<path>clgate/[^:]+\.py):\d+: error: ", re.MULTILINE)


def _import_tree(tmp: Path) -> Path:
    """``tmp/clgate`` laid out as installed: clgate's own entries plus the layer folders under their names."""
    pkg = tmp / "clgate"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "clgate").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for layer in LAYERS:
        (pkg / layer).symlink_to(ROOT / layer)
    return tmp


def _module(path: str) -> str:
    """``clgate/store/jobs.py`` → ``clgate.store.jobs``; a package's ``__init__.py`` → the package."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def failing_modules(report: str) -> dict[str, list[str]]:
    """Module → its error lines, from mypy's report (paths relative to the link tree)."""
    failing: dict[str, list[str]] = {}
    for line in report.splitlines():
        match = _ERROR.match(line)
        if match:
            failing.setdefault(_module(match["path"]), []).append(line)
    return failing


def test_mypy_over_the_whole_package_fails_only_in_the_listed_modules(tmp_path):
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    tree = _import_tree(tmp_path / "tree")
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--no-error-summary",
        "--hide-error-context",
        "-p",
        "clgate",
    ]
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        env={"MYPYPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = (done.stdout + done.stderr).replace(f"{tree}/", "")
    assert done.returncode in (0, 1), report  # 2: mypy itself failed (bad configuration, crash)
    failing = failing_modules(report)
    unlisted = {m: lines for m, lines in failing.items() if m not in NOT_YET_CLEAN}
    assert not unlisted, "type errors in modules that must stay clean:\n" + "\n".join(
        line for lines in unlisted.values() for line in lines
    )
    clean_now = sorted(NOT_YET_CLEAN - failing.keys())
    assert not clean_now, f"now clean, remove from NOT_YET_CLEAN in tests/test_types.py: {clean_now}"


def test_the_report_is_read_per_module():
    report = (
        "clgate/store/jobs.py:3: error: Incompatible types  [assignment]\n"
        "clgate/store/jobs.py:9: note: See https://mypy.readthedocs.io\n"
        "clgate/engine/__init__.py:1: error: Name 'x' is not defined  [name-defined]\n"
        "clgate/metrics/arrays.py:5: note: Revealed type is 'int'\n"
    )
    assert {m: len(lines) for m, lines in failing_modules(report).items()} == {
        "clgate.store.jobs": 1,
        "clgate.engine": 1,
    }

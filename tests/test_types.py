"""mypy (with the pydantic plugin, configured in pyproject.toml) is clean on the contract and the pure core.

The layer folders install under one import root (``schemas/`` is ``clgate.schemas``) through setuptools'
package-dir mapping, which mypy cannot follow in an editable install; the test checks the modules by
their real names through a tree of links that has that layout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("clgate.schemas", "clgate.metrics", "clgate.policy", "clgate.fmeca")
LAYERS = ("schemas", "workers", "service", "examples")


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


def test_mypy_is_clean_on_schemas_and_the_pure_core(tmp_path):
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
    ]
    for package in CHECKED:
        cmd += ["-p", package]
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        env={"MYPYPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = (done.stdout + done.stderr).replace(f"{tree}/", "")
    assert done.returncode == 0, report

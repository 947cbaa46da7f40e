"""Shared test helpers.

Tests that need a real external program (redis-server, promtool, chromium) use the
``require_binary`` fixture: locally a missing program skips the test with the install hint; in CI
(``CI=true``)
it fails, so a missing install step cannot hide behind a green run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fixtures.ci import missing

REPO = Path(__file__).resolve().parents[1]


def _require_binary(name: str, package: str | None = None) -> str:
    path = shutil.which(name)
    if path:
        return path
    missing(f"{name} not found (Debian package {package or name}; ./dev.sh test installs it as root)")


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def artifacts_dir() -> Path:
    """Where tests keep artifacts worth looking at (screenshots, reports): test-artifacts/."""
    path = REPO / "test-artifacts"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def require_binary():
    """``require_binary("redis-server")`` → its path; skip locally / fail in CI when missing."""
    return _require_binary


# Fixtures shared across test folders (tests mirror the package tree, so several folders use each set).
pytest_plugins = [
    "tests.fixtures.gate",
    "tests.fixtures.engine",
    "tests.fixtures.service",
    "tests.fixtures.checkout",
]

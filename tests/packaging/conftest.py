"""The wheel, built once per test process from a clean copy of the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Never copied: local environments, build outputs, caches, run outputs.
_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
    ".ruff_cache", ".mypy_cache", "clgate-out", "clgate-data", "test-artifacts", ".worktrees",
)


def copy_checkout(dest: Path) -> Path:
    """The files of the checkout (git's tracked and untracked-but-not-ignored files) under ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO, capture_output=True, text=True,
    )
    if listed.returncode != 0:  # not a git checkout (an unpacked sdist): copy the tree minus the usual junk
        shutil.copytree(REPO, dest, ignore=_IGNORED)
        return dest
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel --no-deps --no-build-isolation`` of a copy of the checkout (the build leaves no trace here)."""
    source = copy_checkout(tmp_path_factory.mktemp("source") / "clgate")
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out),
         str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = sorted(out.glob("clgate-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]

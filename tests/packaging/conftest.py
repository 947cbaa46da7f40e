"""The wheel, built once per test process from a clean copy of the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def wheel(tmp_path_factory, checkout_copier) -> Path:
    """``pip wheel --no-deps --no-build-isolation`` of a copy of the checkout (no trace left here)."""
    source = checkout_copier(tmp_path_factory.mktemp("source") / "clgate")
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = sorted(out.glob("clgate-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def install_into_fresh_venv(venv: Path, wheel: Path, requirement: str, repo: Path) -> Path:
    """A venv outside the repository with ``requirement`` installed as a user would: ``pip install
    --find-links <the wheel's folder>`` (the dependencies pinned by ``-c constraints/dev.txt``)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--find-links",
            str(wheel.parent),
            "-c",
            str(repo / "constraints" / "dev.txt"),
            requirement,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


@pytest.fixture(scope="session")
def user_venv(wheel, tmp_path_factory) -> Path:
    """clgate (base install) from the wheel just built, in a venv outside the repository."""
    from clgate._version import __version__

    repo = Path(__file__).resolve().parents[2]
    venv = tmp_path_factory.mktemp("user") / "venv"
    return install_into_fresh_venv(venv, wheel, f"clgate=={__version__}", repo)

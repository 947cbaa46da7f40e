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

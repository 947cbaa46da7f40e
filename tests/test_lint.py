"""ruff's lint rules (the explicit selection in pyproject.toml) and its formatting hold on the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    pytest.importorskip("ruff", reason="ruff comes with the dev extra")
    exe = Path(sys.executable).parent / "ruff"
    return [str(exe)] if exe.exists() else [shutil.which("ruff") or "ruff"]


@pytest.mark.parametrize(
    "args",
    [["check", "--no-cache", "--output-format", "concise", "."], ["format", "--no-cache", "--check", "."]],
    ids=["check", "format"],
)
def test_ruff(args):
    done = subprocess.run([*_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]

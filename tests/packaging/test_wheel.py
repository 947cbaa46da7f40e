"""The built wheel: one import root (``clgate``) and every data file the installed package needs."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path, PurePosixPath

import pytest


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


@pytest.mark.slow
def test_the_installed_wheel_runs_a_job_and_gates_it(wheel, tmp_path):
    """``pip install --find-links DIR 'clgate[engine]==V'`` into a venv outside the repository (torch
    pinned by the constraints to the local CPU build), then ``clgate run`` on the shipped digits job
    and ``clgate gate`` with a preset, from a directory that holds no clgate file."""
    from clgate._version import __version__
    from tests.packaging.conftest import install_into_fresh_venv

    repo = Path(__file__).resolve().parents[2]
    venv = install_into_fresh_venv(tmp_path / "venv", wheel, f"clgate[engine]=={__version__}", repo)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clgate = str(venv / "bin" / "clgate")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [clgate, *args], capture_output=True, text=True, check=False, cwd=work, env=env, timeout=600
        )

    where = "from importlib.resources import files; print(files('clgate.examples') / 'jobs/digits-er.yaml')"
    job = subprocess.run(
        [str(venv / "bin" / "python"), "-c", where], capture_output=True, text=True, check=True, cwd=work
    ).stdout.strip()
    assert "site-packages" in job
    done = run("run", job, "--out", "logs", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    logs = sorted(str(p) for p in (work / "logs").glob("log-seed*.json"))
    assert logs
    done = run("gate", "--log", *logs, "--policy", "preset:digits-release", "--out", "gate", "--json")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    decision = json.loads(done.stdout)
    assert decision["policy_name"] == "digits-release" and decision["verdict"] in ("PASS", "WARN", "FAIL")
    assert (work / "gate" / "report.html").is_file()


@pytest.mark.slow
def test_the_release_builds_an_sdist_and_a_wheel_that_twine_accepts(tmp_path, checkout_copier):
    """What .github/workflows/release.yml publishes: ``python -m build`` (here without isolation, offline)
    and ``twine check --strict``; the version comes from clgate/_version.py."""
    import sys

    from clgate._version import __version__

    source = checkout_copier(tmp_path / "source")
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    names = sorted(p.name for p in dist.iterdir())
    assert names == [f"clgate-{__version__}-py3-none-any.whl", f"clgate-{__version__}.tar.gz"]
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2


def test_the_example_plugin_package_is_not_inside(wheel):
    """examples/plugins/ holds distributions of their own: users install them, the wheel leaves them out."""
    assert not [n for n in _names(wheel) if "/plugins/" in n or "clgate_example_metrics" in n]

"""Commands whose extra is missing exit 2 with one line naming it; the base commands import no framework."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from clgate.cli import app, extras

runner = CliRunner()

# Distributions of the engine and service extras that the base install does not bring.
ENGINE_ONLY = {"torch", "scikit-learn", "safetensors", "pillow"}
SERVICE_ONLY = {"fastapi", "uvicorn", "celery", "sqlalchemy", "alembic", "prometheus-client"}


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch, repo_root):
    monkeypatch.chdir(repo_root)  # the examples/ paths below are the checkout's


@pytest.fixture
def without(monkeypatch):
    """``without({"torch", …})``: those distributions read as not installed."""

    def hide(names: set[str]) -> None:
        real = extras.is_installed
        monkeypatch.setattr(extras, "is_installed", lambda name: name not in names and real(name))

    return hide


def test_extra_requirements_come_from_the_package_metadata():
    assert set(extras.extra_requirements("engine")) >= ENGINE_ONLY
    assert set(extras.extra_requirements("service")) >= SERVICE_ONLY
    assert "clgate" not in extras.extra_requirements("all")
    assert extras.extra_requirements("no-such-extra") == []


@pytest.mark.parametrize(
    "argv, extra",
    [
        (["run", "examples/jobs/digits-er.yaml"], "engine"),
        (["evaluate", "--checkpoints", "a.safetensors", "examples/jobs/digits-er.yaml"], "engine"),
        (["demo"], "engine"),
        (["serve"], "service"),
        (["worker"], "service"),
        (["keys", "create", "--role", "admin", "--name", "ci"], "service"),
        (["db", "upgrade"], "service"),
    ],
)
def test_a_missing_extra_exits_2_naming_it(without, argv, extra, tmp_path):
    without(ENGINE_ONLY if extra == "engine" else SERVICE_ONLY)
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert f"pip install 'clgate[{extra}]'" in res.output
    assert f"clgate {argv[0]}" in res.output
    assert "Traceback" not in res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output


def test_gate_with_job_needs_the_engine(without, tmp_path):
    without({"torch"})
    policy = tmp_path / "p.yaml"
    policy.write_text("name: p\nrules:\n  - {metric: mica, floor: 0.5}\n")
    res = runner.invoke(app, ["gate", "--job", "examples/jobs/digits-er.yaml", "--policy", str(policy)])
    assert res.exit_code == 2, res.output
    assert "clgate[engine]" in res.output and "torch" in res.output


def test_help_still_works_without_the_extra(without):
    without(ENGINE_ONLY | SERVICE_ONLY)
    for argv in (["run", "--help"], ["serve", "--help"], ["keys", "create", "--help"]):
        res = runner.invoke(app, argv)
        assert res.exit_code == 0, res.output
        assert "Usage" in res.output


def test_base_commands_run_without_the_extras(without, tmp_path):
    without(ENGINE_ONLY | SERVICE_ONLY)
    res = runner.invoke(app, ["metrics", "examples/logs/spec-example.json", "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["schema", "policy"])
    assert res.exit_code == 0, res.output


# (PIL is not listed: matplotlib, a base dependency, loads pillow itself.)
HEAVY = ("torch", "sklearn", "safetensors", "fastapi", "uvicorn", "celery", "sqlalchemy", "alembic")


def test_base_commands_import_no_framework(tmp_path, repo_root):
    """``import clgate``, ``--help``, ``metrics``, ``gate``, ``schema`` load none of the extras' modules."""
    script = f"""
import sys
from typer.testing import CliRunner
import clgate
from clgate.cli import app
r = CliRunner()
runs = [
    ["--help"],
    ["metrics", "examples/logs/spec-example.json", "--json"],
    ["gate", "--log", "examples/logs/spec-example.json", "--policy", "examples/policies/regression-only.yaml",
     "--baseline", "examples/logs/spec-example.json", "--out", {str(tmp_path / "out")!r}],
    ["schema", "evaluation-log"],
]
for argv in runs:
    res = r.invoke(app, argv)
    assert res.exit_code == 0, (argv, res.output)
loaded = sorted(m for m in {HEAVY!r} if m in sys.modules)
print("LOADED", loaded)
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=repo_root,
    )
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout, out.stdout

"""The real thing: the engine trains on digits, the shipped example policy judges the logs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from clgate.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_demo_er_passes_finetune_fails(tmp_path, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    out = tmp_path / "demo"
    res = runner.invoke(app, ["demo", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "demo verdicts: finetune FAIL, er PASS" in res.output
    for strategy in ("er", "finetune"):
        for name in ("report.html", "report.md", "decision.json", "metrics.json", "fmeca.csv", "junit.xml"):
            assert (out / strategy / name).is_file(), (strategy, name)
    ft = json.loads((out / "finetune" / "decision.json").read_text())
    failed = {r["id"] for r in ft["rules"] if r["status"] == "fail"}
    # the stated reasons: the worst class is forgotten entirely, and so is the worst moment
    assert {"worst-class", "worst-moment", "forgetting", "every-class-final"} <= failed
    assert ft["headline"]["mica"] == 0.0
    er = json.loads((out / "er" / "decision.json").read_text())
    assert all(r["status"] == "pass" for r in er["rules"])
    assert er["strategy"] == "er" and er["provenance"]["command"] == "clgate demo"


@pytest.mark.slow
def test_gate_job_runs_the_engine_first(tmp_path, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    res = runner.invoke(app, ["gate", "--job", "examples/jobs/digits-finetune.yaml", "--policy",
                              "examples/policies/digits-release.yaml", "--out", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert (tmp_path / "logs" / "log-seed0.json").is_file() and (tmp_path / "junit.xml").is_file()
    bad = runner.invoke(app, ["gate", "--job", "examples/jobs/digits-finetune.yaml", "--set", "training.lr=-1",
                              "--policy", "examples/policies/digits-release.yaml", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "training.lr" in bad.output

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
    # one consistent story in the ER report: verdict, worst class at its worst moment, FMECA
    worst = er["headline"]["worst_moment"]
    assert worst["accuracy"] == er["headline"]["min_class_acc"] and worst["seed"] == 0
    md = (out / "er" / "report.md").read_text(encoding="utf-8")
    html = (out / "er" / "report.html").read_text(encoding="utf-8")
    named = f"class '{worst['class_name']}' (task {worst['task']})"
    assert named in md and f"iteration {worst['iteration']}" in md
    assert named.replace("'", "&#39;") in html and 'id="fig-heatmap"' in html
    rows = er["fmeca"]["rows"]
    assert (
        er["fmeca"]["unrated"] == 0 and len({r["severity"] for r in rows}) >= 3
    )  # the policy rates every class
    assert len({r["rpn_worst"] for r in rows}) >= 3  # the worksheet tells the classes apart
    assert len({r["occurrence_final"] for r in rows}) >= 3
    highs = sum(r["priority_worst"] == "High" for r in rows)
    if highs:  # a PASS with High modes says why
        assert "PASS with" in md and "High-priority failure mode(s)" in md and 'id="fmeca-note"' in html
    listed = [x for x in md.splitlines() if x.startswith("| ") and x.split("|")[1].strip().isdigit()]
    assert len(listed) == len(rows) == 10  # the whole worksheet (top 10) is listed


@pytest.mark.slow
def test_gate_job_runs_the_engine_first(tmp_path, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    res = runner.invoke(
        app,
        [
            "gate",
            "--job",
            "examples/jobs/digits-finetune.yaml",
            "--policy",
            "examples/policies/digits-release.yaml",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 1, res.output
    assert (tmp_path / "logs" / "log-seed0.json").is_file() and (tmp_path / "junit.xml").is_file()
    bad = runner.invoke(
        app,
        [
            "gate",
            "--job",
            "examples/jobs/digits-finetune.yaml",
            "--set",
            "training.lr=-1",
            "--policy",
            "examples/policies/digits-release.yaml",
            "--out",
            str(tmp_path),
        ],
    )
    assert bad.exit_code == 2 and "training.lr" in bad.output

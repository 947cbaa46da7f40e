"""The CI snippets in examples/ci/ are valid YAML and their `clgate gate` step runs as written."""

from __future__ import annotations

import glob
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import dump_log


def _gate_command(path: Path) -> str:
    doc = yaml.safe_load(path.read_text())
    if "jobs" in doc:  # GitHub Actions
        steps = doc["jobs"]["gate"]["steps"]
        runs = [s["run"] for s in steps if "run" in s]
        assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in steps)
    else:  # GitLab CI
        job = doc["clgate-gate"]
        runs = job["script"]
        assert job["artifacts"]["reports"]["junit"] == "gate-out/junit.xml"
    [command] = [r for r in runs if r.strip().startswith("clgate gate")]
    return " ".join(command.split())


@pytest.mark.parametrize("snippet", ["github-actions.yml", "gitlab-ci.yml"])
def test_snippet_gate_step_runs(snippet, repo_root, tmp_path, monkeypatch, build_log):
    command = _gate_command(repo_root / "examples" / "ci" / snippet)
    (tmp_path / "eval-logs").mkdir()
    (tmp_path / "released").mkdir()

    def digits_log(acc: float, seed: int):  # split digits: 5 tasks of 2 classes, as the policy rates them
        points = [(k, True, [acc] * (2 * k) + [None] * (10 - 2 * k)) for k in range(1, 6)]
        return build_log(
            points, tasks=[[2 * t, 2 * t + 1] for t in range(5)], names=[str(c) for c in range(10)], seed=seed
        )

    dump_log(digits_log(0.9, 0), tmp_path / "eval-logs" / "log-seed0.json")
    dump_log(digits_log(0.88, 1), tmp_path / "eval-logs" / "log-seed1.json")
    dump_log(digits_log(0.85, 0), tmp_path / "released" / "log.json")
    policy = tmp_path / "examples" / "policies"
    policy.mkdir(parents=True)
    policy.joinpath("digits-release.yaml").write_text(
        (repo_root / "examples" / "policies" / "digits-release.yaml").read_text()
    )
    monkeypatch.chdir(tmp_path)
    summary = tmp_path / "step-summary.md"
    args = []
    for word in shlex.split(command.replace("$GITHUB_STEP_SUMMARY", str(summary)))[2:]:
        args.extend(sorted(glob.glob(word)) if "*" in word else [word])
    res = CliRunner().invoke(app, ["gate", *args])
    # hand-built digit logs: a real verdict, not a usage error
    assert res.exit_code in (0, 1), res.output
    assert (tmp_path / "gate-out" / "junit.xml").is_file()
    assert (tmp_path / "gate-out" / "report.html").is_file()
    md = summary if "GITHUB" in command else tmp_path / "gate-out" / "summary.md"
    assert md.read_text().startswith("## ")

"""``clgate metrics`` and ``clgate schema`` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clgate.cli import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "logs" / "spec-example.json"
runner = CliRunner()

# Hand-computed from the example log's task-end points (macro task accuracy, 50 samples a class):
# task 1 end: classes .94 .90; task 2 end: .50 .72 .92 .88; task 3 end: .36 .60 .66 .74 .96 .94.
EXPECTED_ACC = [0.92, (0.61 + 0.90) / 2, (0.48 + 0.70 + 0.95) / 3]
EXPECTED_MICA = [0.90, 0.50, 0.36]


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["metrics", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_output_contract() -> None:
    out = run_json(str(EXAMPLE))
    metrics = out["metrics"]
    assert metrics["acc"] == pytest.approx(EXPECTED_ACC)
    assert metrics["mica"] == pytest.approx(EXPECTED_MICA)
    assert metrics["mica_old"][0] is None and metrics["mica_old"][1:] == pytest.approx([0.50, 0.36])
    for metric_id in ("wamica", "bwt", "a_lifetime", "min_acc", "wc_acc", "wf10", "wf100", "wp10", "wp100"):
        assert metric_id in metrics
    # The example evaluates no future task: forward transfer is null and says why.
    assert metrics["fwt_lifetime"] is None and out["reasons"]["fwt_lifetime"]


def test_window_and_task_accuracy_options() -> None:
    out = run_json(str(EXAMPLE), "--window", "3", "--window", "5", "--task-accuracy", "micro")
    assert {"wf3", "wf5", "wp3", "wp5"} <= set(out["metrics"])
    assert "wf10" not in out["metrics"]
    assert out["task_accuracy"] == "micro"


def test_several_runs_give_aggregates() -> None:
    out = run_json(str(EXAMPLE), str(EXAMPLE))
    assert len(out["runs"]) == 2
    mica = out["aggregates"]["mica"]
    assert mica["mean"] == pytest.approx(EXPECTED_MICA) and mica["worst"] == pytest.approx(EXPECTED_MICA)
    assert out["aggregates"]["wamica"]["std"] == pytest.approx(0.0)


def test_baseline_adds_class_regression(tmp_path: Path) -> None:
    doc = json.loads(EXAMPLE.read_text())
    doc["points"][-1]["correct"][2] = 13  # class "crack": .66 → .26 in the candidate
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(doc))
    out = run_json(str(candidate), "--baseline", str(EXAMPLE))
    assert out["metrics"]["class_regression"] == pytest.approx(0.40)
    assert out["class_deltas"][2] == pytest.approx(-0.40)
    table = runner.invoke(app, ["metrics", str(candidate), "--baseline", str(EXAMPLE)])
    assert table.exit_code == 0 and "crack" in table.output and "-0.4000" in table.output


def test_table_output_lists_metrics_by_task() -> None:
    result = runner.invoke(app, ["metrics", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert "task 3" in result.output and "mica" in result.output and "wamica" in result.output


def test_bad_log_exits_2_with_the_message(tmp_path: Path) -> None:
    doc = json.loads(EXAMPLE.read_text())
    doc["points"][3]["correct"][1] = 70
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    proc = subprocess.run(
        [sys.executable, "-m", "clgate", "metrics", str(bad)], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 2
    assert "points[3].correct[1]: correct (70) exceeds total (50)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(["--weights", "a,b"], "--weights", id="weights-not-numbers"),
        pytest.param(["--window", "1"], "--window", id="window-too-small"),
        pytest.param(["--confidence", "1.5"], "--confidence", id="confidence"),
    ],
)
def test_bad_options_exit_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["metrics", str(EXAMPLE), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_schema_command_prints_json_schema() -> None:
    result = runner.invoke(app, ["schema", "evaluation-log"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "EvaluationLog" and "points" in schema["properties"]
    assert runner.invoke(app, ["schema", "nope"]).exit_code == 2

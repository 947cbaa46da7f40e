"""Issue 9 from the command line: the diverged EWC example, a subsample of one, channels-last images
declared wrong — each exits 2 with the field and the reason, never 3 with a dump; the gate fails the
diverged log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from clgate.cli import app

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "jobs" / "digits-er.yaml"
POLICY = ROOT / "examples" / "policies" / "digits-release.yaml"


def _cli(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.slow
def test_the_diverged_ewc_example_exits_2_and_its_log_fails_the_gate(tmp_path):
    out = tmp_path / "ewc"
    result = _cli(
        "run",
        JOB,
        "strategy.name=ewc",
        "strategy.ewc_lambda=10000",
        "--device",
        "cpu",
        "-q",
        "--out",
        out,
    )
    assert result.exit_code == 2, result.output
    assert "training diverged at task" in result.output and "iteration" in result.output
    assert "Traceback" not in result.output
    gated = _cli("gate", out / "log-seed0.json", "--policy", POLICY, "--json")
    decision = json.loads(gated.output)
    assert gated.exit_code == 1 and decision["verdict"] == "FAIL" and decision["diverged"]
    assert not decision["complete"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["evaluation.subsample_per_task=1"],
            "evaluation.subsample_per_task: 1 sample(s) for task 1's 2 classes",
        ),
        (
            ["scenario.first_task_learned=true"],
            "scenario.first_task_learned: needs the candidate's trained model",
        ),
    ],
)
def test_bad_trust_inputs_exit_2_naming_the_field(tmp_path, args, message):
    result = _cli("run", JOB, *args, "training.epochs=1", "--device", "cpu", "-q", "--out", tmp_path)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_channels_last_npz_declared_channels_first_exits_2(tmp_path):
    x = np.zeros((4, 8, 8, 3), dtype=np.float32)
    y = np.array([0, 0, 1, 1])
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x, y_test=y)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "data: {kind: npz, path: d.npz}\nscenario: {n_tasks: 2}\nmodel: {arch: cnn}\ndevice: cpu\n",
        encoding="utf-8",
    )
    result = _cli("run", spec, "-q", "--out", tmp_path / "out")
    assert result.exit_code == 2 and "set data.layout: channels_last" in result.output, result.output

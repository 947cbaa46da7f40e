"""``clgate run`` and ``clgate evaluate``: logs written, overrides, exit codes, no tracebacks;
``clgate metrics`` reads what ``clgate run`` writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clgate.cli import app
from clgate.documents import load_job, load_log

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def test_run_example_spec_with_overrides_then_metrics(tmp_path, cli):
    out = tmp_path / "out"
    result = cli(
        "run",
        EXAMPLES / "digits-er.yaml",
        "training.epochs=1",
        "--set",
        "evaluation.eval_every=20",
        "--seeds",
        "0,1",
        "--device",
        "cpu",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    logs = sorted(out.glob("log-seed*.json"))
    assert [p.name for p in logs] == ["log-seed0.json", "log-seed1.json"]
    log = load_log(logs[0])
    assert (
        log.meta["strategy"] == "er" and log.meta["eval_every"] == 20 and log.meta["training"]["epochs"] == 1
    )
    assert "final accuracy" in result.output
    assert "iteration" in result.output  # plain progress lines when not on a terminal
    metrics = cli("metrics", logs[0], "--json")
    assert metrics.exit_code == 0, metrics.output
    values = json.loads(metrics.output)["metrics"]
    assert len(values["mica"]) == 5 and 0 <= values["mica"][-1] <= 1
    runs = cli("metrics", *logs, "--json")
    assert runs.exit_code == 0, runs.output


@pytest.mark.parametrize(
    "args,message",
    [
        pytest.param(["training.lr=-1"], "training.lr: Input should be greater than 0", id="bad-override"),
        pytest.param(
            ["--set", "strategy.mem_szie=3"], "er takes no parameter 'mem_szie'", id="bad-strategy-param"
        ),
        pytest.param(
            ["--set", "data={kind: npz, path: missing.npz}"], "missing.npz: no such file", id="missing-data"
        ),
        pytest.param(
            ["--set", "model.arch=cnn", "--set", "model.weights=nothing.safetensors"],
            "nothing.safetensors: no such file",
            id="missing-weights",
        ),
        pytest.param(["scenario.n_tasks=3"], "10 classes do not split into 3 equal tasks", id="bad-split"),
    ],
)
def test_bad_input_exits_2_with_the_message_and_no_traceback(tmp_path, cli, args, message):
    result = cli("run", EXAMPLES / "digits-er.yaml", *args, "--out", tmp_path, "-q")
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_run_refuses_missing_spec(tmp_path, cli):
    result = cli("run", tmp_path / "nope.yaml", "--out", tmp_path)
    assert result.exit_code == 2 and "cannot read file" in result.output


def test_evaluate_checkpoints_from_the_command_line(tmp_path, cli, monkeypatch):
    import torch
    from safetensors.torch import save_file

    from clgate.engine.models import build_model

    spec = tmp_path / "job.yaml"
    spec.write_text("data: digits\nscenario: {n_tasks: 5}\nmodel: {arch: mlp}\ndevice: cpu\n")
    monkeypatch.chdir(tmp_path)
    names = []
    for k in range(5):
        torch.manual_seed(k)
        save_file(build_model("mlp", (1, 8, 8), 10).state_dict(), f"t{k}.safetensors")
        names.append(f"t{k}.safetensors")
    result = cli("evaluate", "--checkpoints", names[0], *names[1:], spec, "--out", "out", "-q")
    assert result.exit_code == 0, result.output
    log = load_log(tmp_path / "out" / "log-seed0.json")
    assert [p.iteration for p in log.points] == [1, 2, 3, 4, 5] and all(p.task_end for p in log.points)
    assert log.meta["strategy"] == "evaluate" and len(log.meta["checkpoints"]) == 5
    # without a spec file the fields come from key=value arguments
    result = cli(
        "evaluate",
        "-c",
        f"{names[0]}@10",
        "-c",
        f"{names[1]}@20",
        "data=digits",
        "scenario.n_tasks=2",
        "model.arch=mlp",
        "device=cpu",
        "--out",
        "out2",
        "-q",
    )
    assert result.exit_code == 0, result.output
    result = cli("evaluate", "-c", names[0], spec, "--out", "out3", "-q")
    assert result.exit_code == 2 and "1 given for 5 tasks" in result.output
    result = cli("evaluate", spec, "--out", "out4", "-q")
    assert result.exit_code == 2 and "give the checkpoints" in result.output


@pytest.mark.slow
def test_ctrl_c_leaves_a_valid_partial_log(tmp_path):
    """A real SIGINT to a running `clgate run`: exit 130, and the log so far is a valid partial log."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from clgate.cli import main; main()",
            "run",
            str(EXAMPLES / "digits-er.yaml"),
            "training.iterations=1000",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        assert proc.stderr is not None
        for line in proc.stderr:  # plain progress lines (not a terminal); wait until task 2 runs
            if "task 2/5" in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "partial log written to" in stderr and "Traceback" not in stderr
    log = load_log(out / "log-seed0.json")
    assert log.partial and log.finished_tasks >= 1 and log.points[-1].task >= 2


def test_clgate_sandbox_picks_how_the_model_runs_and_not_what_is_counted(
    tmp_path, cli, monkeypatch, require_binary
):
    """CLGATE_SANDBOX=bwrap confines the model's child in bubblewrap (the service's setting); unset, it is a
    plain subprocess; the trusted side counts the same either way."""
    require_binary("bwrap", "bubblewrap")
    from clgate.cli import engine_cmd
    from clgate.workers.sandbox import SandboxLauncher

    args = [
        EXAMPLES / "digits-er.yaml",
        "training.epochs=1",
        "evaluation.eval_every=20",
        "--device",
        "cpu",
        "-q",
    ]
    spec = load_job(EXAMPLES / "digits-er.yaml")
    monkeypatch.delenv("CLGATE_SANDBOX", raising=False)
    assert engine_cmd.job_launcher(spec).__name__ == "local_launcher"
    assert cli("run", *args, "--out", tmp_path / "plain").exit_code == 0
    monkeypatch.setenv("CLGATE_SANDBOX", "bwrap")
    monkeypatch.setenv("CLGATE_DATA_DIR", str(tmp_path / "data"))
    assert isinstance(engine_cmd.job_launcher(spec), SandboxLauncher)
    assert cli("run", *args, "--out", tmp_path / "confined").exit_code == 0
    plain = load_log(tmp_path / "plain" / "log-seed0.json")
    confined = load_log(tmp_path / "confined" / "log-seed0.json")
    assert confined.points == plain.points and len(plain.points) > 5
    monkeypatch.setenv("CLGATE_SANDBOX", "sometimes")
    result = cli("run", *args, "--out", tmp_path / "bad")
    assert result.exit_code == 2 and "CLGATE_SANDBOX: 'sometimes' is not one of" in result.output

"""``clgate gate --mlflow-uri`` against a real ``mlflow server`` (SQLite backend, loopback, free port,
artifacts in a temporary folder): PASS moves the alias, FAIL does not, tags and artifacts are there,
and an MLflow that is down changes nothing but a warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from clgate.cli import app
from tests.fixtures.service import LOOSE_POLICY, REPO, STRICT_POLICY, free_port

mlflow = pytest.importorskip("mlflow")  # in clgate[dev]: present in every test environment
EXAMPLE_LOG = REPO / "examples" / "logs" / "spec-example.json"


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking + registry server on 127.0.0.1, stopped after the module."""
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination",
        str(root / "artifacts"),
        "--workers",
        "1",
    ]
    log = (root / "server.log").open("wb")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        argv, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (root / "server.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (root / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()


@pytest.fixture
def registered(mlflow_server):
    """A registered model with two versions (records only: nothing is ever loaded from them)."""
    client = mlflow.MlflowClient(tracking_uri=mlflow_server, registry_uri=mlflow_server)
    name = f"digits-{time.monotonic_ns()}"
    client.create_registered_model(name)
    run = client.create_run(client.create_experiment(f"train-{name}"))
    for _ in range(2):
        client.create_model_version(name, f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    return client, name


def gate(tmp_path: Path, policy: dict, *args: str):
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    argv = ["gate", "--log", str(EXAMPLE_LOG), "--policy", str(tmp_path / "policy.yaml"), *args]
    return CliRunner().invoke(app, argv)


def test_pass_moves_the_alias_and_fail_does_not(mlflow_server, registered, tmp_path):
    client, name = registered
    common = ("--mlflow-uri", mlflow_server, "--mlflow-experiment", "gates", "--alias", "champion")
    passed = gate(
        tmp_path, LOOSE_POLICY, "--out", str(tmp_path / "out"), "--model-uri", f"models:/{name}/1", *common
    )
    assert passed.exit_code == 0, passed.output
    assert client.get_model_version_by_alias(name, "champion").version == "1"
    v1 = client.get_model_version(name, "1")
    assert v1.tags["clgate.verdict"] == "PASS" and v1.tags["clgate.policy"] == "e2e-loose@1"

    run = client.get_run(v1.tags["clgate.run_id"])
    assert run.data.tags["clgate.verdict"] == "PASS"
    assert run.data.tags["clgate.model_uri"] == f"models:/{name}/1"
    assert run.data.params["clgate.policy_name"] == "e2e-loose"
    decision = json.loads((tmp_path / "out" / "decision.json").read_text())
    assert run.data.metrics["acc"] == pytest.approx(decision["headline"]["acc"])
    history = client.get_metric_history(run.info.run_id, "acc")
    assert [m.step for m in history] == list(range(1, len(history) + 1)) and len(history) > 1
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "clgate")}
    assert {"clgate/decision.json", "clgate/report.html", "clgate/junit.xml"} <= artifacts

    failed = gate(tmp_path, STRICT_POLICY, "--model-uri", f"models:/{name}/2", *common)
    assert failed.exit_code == 1, failed.output
    assert "not moved: the verdict is FAIL" in failed.output
    assert client.get_model_version_by_alias(name, "champion").version == "1"  # unchanged
    v2 = client.get_model_version(name, "2")
    assert v2.tags["clgate.verdict"] == "FAIL"
    run2 = client.get_run(v2.tags["clgate.run_id"])
    assert {a.path for a in client.list_artifacts(run2.info.run_id, "clgate")} >= {"clgate/decision.json"}


WARN_POLICY = {
    "name": "e2e-warn",
    "version": "1",
    "rules": [{"metric": "acc", "floor": 0.0}, {"metric": "mica", "floor": 0.99, "severity": "warn"}],
}
GITHUB = {
    "GITHUB_SHA": "1f2e3d4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/vision",
    "GITHUB_RUN_ID": "42",
}


def test_the_policy_says_which_verdicts_move_the_alias(mlflow_server, registered, tmp_path, monkeypatch):
    client, name = registered
    common = ("--mlflow-uri", mlflow_server, "--mlflow-experiment", "gates", "--alias", "champion")
    for key in ("CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT"):  # only the GitHub build below
        monkeypatch.delenv(key, raising=False)
    for key, value in GITHUB.items():
        monkeypatch.setenv(key, value)
    by_default = gate(tmp_path, WARN_POLICY, "--model-uri", f"models:/{name}/1", *common)
    assert by_default.exit_code == 0, by_default.output
    assert "not moved: the verdict is WARN (the policy moves it on PASS)" in by_default.output
    assert not client.get_registered_model(name).aliases  # WARN does not move it by default

    on_warn = {**WARN_POLICY, "registry": {"move_alias_on": ["PASS", "WARN"]}}
    build = ("--candidate", "digits-mlp", "--candidate-version", "2.4.0")
    moved = gate(tmp_path, on_warn, "--model-uri", f"models:/{name}/2", *build, *common)
    assert moved.exit_code == 0, moved.output
    assert client.get_model_version_by_alias(name, "champion").version == "2"
    v2 = client.get_model_version(name, "2")
    assert v2.tags["clgate.verdict"] == "WARN" and v2.tags["clgate.commit"] == GITHUB["GITHUB_SHA"]
    run = client.get_run(v2.tags["clgate.run_id"])
    assert run.data.tags["mlflow.runName"] == "clgate digits-mlp 2.4.0 @1f2e3d4a5b6c: WARN"
    assert run.data.tags["clgate.candidate"] == "digits-mlp"
    assert run.data.tags["clgate.candidate_version"] == "2.4.0"
    assert run.data.tags["clgate.commit"] == GITHUB["GITHUB_SHA"]
    assert run.data.tags["clgate.ci_run"] == "https://github.com/acme/vision/actions/runs/42"


@pytest.mark.parametrize(
    ("move_alias_on", "says"),
    [
        pytest.param(["PASS", "ERROR"], "ERROR never moves the alias", id="error"),
        pytest.param(["SHIP"], "Input should be", id="not-a-verdict"),
        pytest.param([], "at least 1 item", id="empty"),
    ],
)
def test_a_policy_whose_alias_verdicts_are_wrong_exits_2(tmp_path, move_alias_on, says):
    policy = {**LOOSE_POLICY, "registry": {"move_alias_on": move_alias_on}}
    result = gate(tmp_path, policy)
    assert result.exit_code == 2, result.output
    assert "registry.move_alias_on" in result.output and says in result.output, result.output
    assert "Traceback" not in result.output


def test_mlflow_down_leaves_the_verdict(tmp_path):
    down = f"http://127.0.0.1:{free_port()}"
    for policy, code in ((STRICT_POLICY, 1), (LOOSE_POLICY, 0)):
        result = gate(
            tmp_path, policy, "--mlflow-uri", down, "--model-uri", "models:/m/1", "--alias", "champion"
        )
        assert result.exit_code == code, result.output
        assert "the decision was not logged to MLflow" in result.output and down in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ("--mlflow-uri", "http://x", "--model-uri", "runs:/a/b"), "models:/NAME/VERSION", id="uri"
        ),
        pytest.param(
            ("--mlflow-uri", "http://x", "--alias", "champion"), "--alias needs --model-uri", id="alias"
        ),
        pytest.param(("--model-uri", "models:/m/1"), "need --mlflow-uri", id="no-server"),
    ],
)
def test_bad_mlflow_options_exit_2(tmp_path, args, says):
    result = gate(tmp_path, LOOSE_POLICY, *args)
    assert result.exit_code == 2 and says in result.output, result.output


def test_a_project_logs_every_decision_through_an_mlflow_webhook(
    mlflow_server, app_factory, test_client_class, admin_key, example_log, gate_example_log
):
    app, _ = app_factory(webhook_interval_s=0.1, webhook_backoff_s=0.2)
    admin = {"X-API-Key": admin_key}
    with test_client_class(app) as api:
        hook = api.post(
            "/v1/webhooks", json={"url": mlflow_server, "payload_format": "mlflow"}, headers=admin
        )
        assert hook.status_code == 201, hook.text
        job = gate_example_log(api, admin, example_log)
        deliveries = f"/v1/webhooks/{hook.json()['id']}/deliveries"
        deadline = time.monotonic() + 60
        while (log := api.get(deliveries, headers=admin).json()["data"])[0]["status"] != "delivered":
            assert time.monotonic() < deadline, log
            time.sleep(0.2)
    client = mlflow.MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("clgate-default")
    (run,) = client.search_runs([experiment.experiment_id], filter_string="tags.`clgate.verdict` = 'FAIL'")
    assert run.data.tags["clgate.policy"] == "p@1" and "acc" in run.data.metrics
    assert {a.path for a in client.list_artifacts(run.info.run_id, "clgate")} >= {"clgate/decision.json"}
    assert job["verdict"] == "FAIL"

"""``clgate remote`` and ``clgate.client.Client`` against a real ``clgate serve`` (embedded executor):
submit → wait → fetch, the exit code of each verdict, YAML policies and specs, progress from the queue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clgate.client import Client, Unreachable, prepare_spec
from clgate.schemas.job import JobSpecError
from tests.fixtures.service import LOOSE_POLICY, STRICT_POLICY, free_port, tiny_spec


def remote(service_url: str, key: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env.update(CLGATE_URL=service_url, CLGATE_API_KEY=key)
    return subprocess.run(
        [sys.executable, "-m", "clgate", "remote", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def key_of(service, role: str) -> str:
    return service.clients[role].headers["X-API-Key"]


@pytest.mark.slow
def test_submit_wait_gates_like_clgate_gate(embedded_service, digits_npz, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "digits.npz").write_bytes(digits_npz)
    spec = tiny_spec("x")
    spec["data"]["path"] = "digits.npz"  # a local file: the client uploads it
    (work / "job.yaml").write_text(yaml.safe_dump(spec))
    for policy in (LOOSE_POLICY, STRICT_POLICY):
        (work / f"{policy['name']}.yaml").write_text(yaml.safe_dump(policy))
    url, approver, submitter = embedded_service.url, key_of(embedded_service, "approver"), None
    submitter = key_of(embedded_service, "submitter")

    pushed = remote(url, approver, "policies", "push", "e2e-loose.yaml", cwd=work)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.startswith("e2e-loose@1\tsha256:")

    args = ("submit", "job.yaml", "--model-name", "digits", "--wait", "--timeout", "400")
    passed = remote(url, submitter, *args, "--policy", "e2e-loose@1", "--out", "pass", cwd=work)
    assert passed.returncode == 0, passed.stderr
    assert "PASS: job" in passed.stdout
    decision = json.loads((work / "pass" / "decision.json").read_text())
    assert decision["verdict"] == "PASS"

    # the strict policy is pushed by an approver first (a submitter may not publish policies)
    refused = remote(url, submitter, "policies", "push", "e2e-strict.yaml", cwd=work)
    assert refused.returncode == 2 and "403" in refused.stderr
    assert remote(url, approver, "policies", "push", "e2e-strict.yaml", cwd=work).returncode == 0
    failed = remote(url, submitter, *args, "--policy", "e2e-strict@1", "-q", cwd=work)
    assert failed.returncode == 1, failed.stderr
    assert failed.stdout.splitlines()[-1].startswith("FAIL: job")

    with Client(url, submitter) as client:
        jobs = client.jobs(model_name="digits").data
        assert sorted(j.verdict for j in jobs) == ["FAIL", "PASS"]
        for job in jobs:  # a 5-task run ends at task 5 of 5, fraction 1.0
            p = job.progress
            assert (p.stage, p.task, p.n_tasks, p.fraction) == ("done", 5, 5, 1.0)
    listed = remote(url, submitter, "jobs", "--verdict", "FAIL", cwd=work)
    assert listed.returncode == 0 and listed.stdout.count("FAIL") == 1


def test_progress_exists_from_the_queue_and_errors_exit_by_kind(embedded_service, example_log, tmp_path):
    url = embedded_service.url
    (tmp_path / "run.json").write_bytes(example_log)
    with Client(url, key_of(embedded_service, "approver")) as approver:
        approver.create_policy(LOOSE_POLICY)
    with Client(url, key_of(embedded_service, "submitter")) as client:
        job = client.submit_logs([tmp_path / "run.json"], model_name="m", policy="e2e-loose@1")
        assert job.progress.stage in ("queued", "starting", "running", "done")
        assert job.progress.fraction is not None  # never null, even before a worker took it
        done = client.wait(job.id, timeout=120, poll_s=0.2)
        assert done.state == "succeeded" and done.progress.fraction == 1.0
        assert client.decision(job.id).verdict == "PASS"

    unknown = remote(
        url,
        key_of(embedded_service, "submitter"),
        "submit",
        "--log",
        "run.json",
        "--model-name",
        "m",
        "--policy",
        "nope@1",
        cwd=tmp_path,
    )
    assert unknown.returncode == 2
    assert "policy nope version 1 does not exist" in unknown.stderr and "Traceback" not in unknown.stderr
    down = remote(f"http://127.0.0.1:{free_port()}", "k", "jobs", cwd=tmp_path)
    assert down.returncode == 3 and "cannot reach the clgate service" in down.stderr


def test_unreachable_is_its_own_error():
    with Client(f"http://127.0.0.1:{free_port()}", "k", timeout=2) as client, pytest.raises(Unreachable):
        client.jobs()


def test_prepare_spec_uploads_each_named_file_and_names_a_missing_one(tmp_path):
    (tmp_path / "d.npz").write_bytes(b"x")
    (tmp_path / "t1.pt").write_bytes(b"y")
    uploaded = []

    def upload(path: Path, kind: str) -> str:
        uploaded.append((path.name, kind))
        return "sha256:" + "a" * 64

    spec = {"data": {"kind": "npz", "path": "d.npz"}, "checkpoints": ["t1.pt@10:1"]}
    out = prepare_spec(spec, tmp_path, upload)
    assert uploaded == [("d.npz", "data"), ("t1.pt", "model")]
    assert out["checkpoints"] == [{"path": {"artifact": "sha256:" + "a" * 64}, "iteration": 10, "task": 1}]
    assert spec["data"]["path"] == "d.npz"  # the caller's spec is left as it was
    with pytest.raises(JobSpecError, match=r"model.weights: no file"):
        prepare_spec({"model": {"arch": "mlp", "weights": "w.safetensors"}}, tmp_path, upload)

"""A job submitted to the service names the build it certifies: the candidate's version and the build
(commit, CI run) go from ``JobCreate`` to the job record, into the decision (decision.json, report.md,
junit.xml) and into the ``decision.recorded`` audit event — as ``clgate gate`` names them; the client
sends the CI's build by itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from tests.fixtures.service import LOOSE_POLICY

COMMIT = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c"
RUN_URL = "https://github.com/acme/vision/actions/runs/42"
BUILD = {"commit": COMMIT, "ci": "github", "run_url": RUN_URL, "ref": "refs/heads/main"}
GITHUB_ENV = {
    "GITHUB_SHA": COMMIT,
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/vision",
    "GITHUB_RUN_ID": "42",
}
CI_PREFIXES = ("GITHUB_", "CI_", "GIT_COMMIT", "BUILD_URL", "BUILDKITE")


def _body(ref: str, **extra) -> dict:
    policy = {"name": LOOSE_POLICY["name"], "version": LOOSE_POLICY["version"]}
    return {"mode": "metrics", "model_name": "defect-classifier", "policy": policy, "logs": [ref], **extra}


def _finished(api, job_id: str) -> dict:
    h = api.as_role("viewer")
    deadline = time.monotonic() + 120
    while (job := api.get(f"/v1/jobs/{job_id}", headers=h).json())["state"] in ("queued", "running"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


@pytest.fixture
def log_ref(api, example_log) -> str:
    api.post("/v1/policies", json=LOOSE_POLICY, headers=api.as_role("approver")).raise_for_status()
    r = api.post(
        "/v1/artifacts", params={"kind": "log"}, content=example_log, headers=api.as_role("submitter")
    )
    return r.json()["ref"]


def test_the_decision_its_reports_and_its_audit_event_name_the_build(api, log_ref):
    r = api.post(
        "/v1/jobs",
        json=_body(log_ref, candidate_version="2.4.0", build=BUILD),
        headers=api.as_role("submitter"),
    )
    assert r.status_code == 202, r.text
    assert r.json()["provenance"] == {
        "candidate": {"name": "defect-classifier", "version": "2.4.0"},
        "build": BUILD,
    }
    job = _finished(api, r.json()["id"])
    assert job["state"] == "succeeded", job
    h = api.as_role("viewer")
    results = f"/v1/jobs/{job['id']}/results"

    provenance = json.loads(api.get(f"{results}/decision.json", headers=h).text)["provenance"]
    assert provenance["candidate"] == {"name": "defect-classifier", "version": "2.4.0"}
    assert provenance["build"] == BUILD
    assert provenance["service"]["job_id"] == job["id"]  # the service's own fields are kept

    first = api.get(f"{results}/report.md", headers=h).text.splitlines()[:8]
    line = next(x for x in first if x.startswith("Candidate "))
    assert "defect-classifier 2.4.0" in line and COMMIT[:12] in line and RUN_URL in line, first

    html = api.get(f"{results}/report.html", headers=h).text
    assert "defect-classifier 2.4.0" in html and COMMIT[:12] in html

    junit = ET.fromstring(api.get(f"{results}/junit.xml", headers=h).content)
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert props["candidate"] == "defect-classifier" and props["candidate_version"] == "2.4.0"
    assert props["commit"] == COMMIT and props["ci"] == "github" and props["ci_run_url"] == RUN_URL

    events = api.get(
        "/v1/audit", params={"action": "decision.recorded", "subject_id": job["id"]}, headers=h
    ).json()["data"]
    [event] = events
    assert event["details"]["candidate"] == "defect-classifier"
    assert event["details"]["candidate_version"] == "2.4.0"
    assert event["details"]["commit"] == COMMIT and event["details"]["run_url"] == RUN_URL


def test_a_job_without_a_build_names_its_candidate(api, log_ref):
    r = api.post("/v1/jobs", json=_body(log_ref), headers=api.as_role("submitter"))
    assert r.status_code == 202, r.text
    assert r.json()["provenance"] == {
        "candidate": {"name": "defect-classifier", "version": None},
        "build": None,
    }
    job = _finished(api, r.json()["id"])
    document = api.get(f"/v1/jobs/{job['id']}/decision", headers=api.as_role("viewer")).json()["document"]
    assert document["provenance"]["candidate"] == {"name": "defect-classifier"}
    assert "build" not in document["provenance"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        pytest.param({"candidate_version": ""}, "candidate_version", id="empty-version"),
        pytest.param({"candidate_version": "2.4 beta"}, "candidate_version", id="version-with-space"),
        pytest.param({"candidate_version": "v" * 129}, "candidate_version", id="version-too-long"),
        pytest.param({"build": {**BUILD, "commit": "abc12"}}, "build.commit", id="commit-too-short"),
        pytest.param({"build": {**BUILD, "commit": "z" * 40}}, "build.commit", id="commit-not-hex"),
        pytest.param({"build": {**BUILD, "ci": "travis"}}, "build.ci", id="unknown-ci"),
        pytest.param({"build": {**BUILD, "run_url": "ftp://x/1"}}, "build.run_url", id="run-url-not-http"),
        pytest.param(
            {"build": {**BUILD, "run_url": "https://x/" + "a" * 2000}}, "build.run_url", id="run-url-too-long"
        ),
        pytest.param({"build": {**BUILD, "ref": "a" * 256}}, "build.ref", id="ref-too-long"),
        pytest.param({"build": {**BUILD, "branch": "main"}}, "build.branch", id="unknown-field"),
        pytest.param({"build": {"ci": "github"}}, "build.commit", id="no-commit"),
    ],
)
def test_bad_provenance_is_422_naming_the_field(api, log_ref, extra, field):
    r = api.post("/v1/jobs", json=_body(log_ref, **extra), headers=api.as_role("submitter"))
    assert r.status_code == 422, r.text
    problems = r.json()["problems"]
    assert any(p.startswith(f"body.{field}:") for p in problems), problems


def test_a_regate_certifies_the_same_build(api, log_ref):
    h = api.as_role("submitter")
    first = api.post("/v1/jobs", json=_body(log_ref, candidate_version="2.4.0", build=BUILD), headers=h)
    job = _finished(api, first.json()["id"])
    r = api.post(
        f"/v1/jobs/{job['id']}/regate", json={"policy": {"name": "e2e-loose", "version": "1"}}, headers=h
    )
    assert r.status_code == 202, r.text
    regated = _finished(api, r.json()["id"])
    assert regated["provenance"] == job["provenance"]
    document = api.get(f"/v1/jobs/{regated['id']}/decision", headers=api.as_role("viewer")).json()["document"]
    assert document["provenance"]["build"]["commit"] == COMMIT


def _without_ci(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(CI_PREFIXES) and not k.startswith("CLGATE_")}


def test_client_and_remote_submit_send_the_ci_build(embedded_service, example_log, tmp_path, monkeypatch):
    from clgate.client import Client

    svc = embedded_service
    svc.clients["approver"].post("/v1/policies", json=LOOSE_POLICY).raise_for_status()
    (tmp_path / "run.json").write_bytes(example_log)
    submitter = svc.clients["submitter"].headers["X-API-Key"]

    for name in list(os.environ):
        if name.startswith(CI_PREFIXES):
            monkeypatch.delenv(name)
    for name, value in GITHUB_ENV.items():
        monkeypatch.setenv(name, value)
    with Client(svc.url, submitter) as client:
        job = client.submit_logs(
            [tmp_path / "run.json"],
            model_name="defect-classifier",
            policy="e2e-loose@1",
            candidate_version="2.4.0",
        )
        assert job.provenance is not None and job.provenance.build is not None
        assert job.provenance.build.model_dump(exclude_none=True) == {
            k: v for k, v in BUILD.items() if k != "ref"
        }
        assert job.provenance.candidate.version == "2.4.0"
        body = {"mode": "metrics", "model_name": "x", "policy": {"name": "e2e-loose", "version": "1"}}
        ref = client.upload(tmp_path / "run.json", "log").ref
        quiet = client.submit({**body, "logs": [ref]}, ci_build=False)
        assert quiet.provenance is not None and quiet.provenance.build is None

    env = {**_without_ci(dict(os.environ)), "CLGATE_URL": svc.url, "CLGATE_API_KEY": submitter}
    env.update(CI_COMMIT_SHA="def4567", CI_PIPELINE_URL="https://gitlab.example/acme/-/pipelines/7")
    args = ["--model-name", "defect-classifier", "--policy", "e2e-loose@1", "--candidate-version", "2.5.0"]
    cmd = [
        sys.executable,
        "-m",
        "clgate",
        "remote",
        "submit",
        "--log",
        "run.json",
        *args,
        "--wait",
        "--out",
        "out",
    ]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    decision = json.loads((tmp_path / "out" / "decision.json").read_text())
    assert decision["provenance"]["candidate"] == {"name": "defect-classifier", "version": "2.5.0"}
    assert decision["provenance"]["build"] == {
        "ci": "gitlab",
        "commit": "def4567",
        "run_url": "https://gitlab.example/acme/-/pipelines/7",
    }

    env["GIT_COMMIT"], env["CI_COMMIT_SHA"] = "not-a-commit", ""
    bad = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "GIT_COMMIT (jenkins): commit:" in bad.stderr, bad.stderr

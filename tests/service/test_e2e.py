"""End to end on real components, driven over HTTP: the API under uvicorn on loopback, and either the
embedded executor or a real Celery worker consuming a real redis-server.

upload → retrain job on digits → decision and reports downloadable → /metrics shows the model's
gauges → re-gate under a stricter policy flips the verdict → waiver in the audit trail → baseline and
a metrics-only job compared with it.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET

import pytest
from prometheus_client.parser import text_string_to_metric_families

from clgate.schemas.evaluation_log import EvaluationLog

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODEL = "digits-e2e"
RESULTS = {
    "decision.json",
    "metrics.json",
    "report.html",
    "report.md",
    "fmeca.csv",
    "junit.xml",
    "logs/log-seed0.json",
}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scenario(svc, digits_npz: bytes, make_spec, policies) -> dict:
    sub, appr, view = svc.clients["submitter"], svc.clients["approver"], svc.clients["viewer"]

    # upload (viewer may not, submitter may); the same content twice is stored once
    assert view.post("/v1/artifacts", params={"kind": "data"}, content=digits_npz).status_code == 403
    r = sub.post("/v1/artifacts", params={"kind": "data", "filename": "digits.npz"}, content=digits_npz)
    assert r.status_code == 201, r.text
    data_ref = r.json()["ref"]
    assert sub.post("/v1/artifacts", params={"kind": "data"}, content=digits_npz).status_code == 200
    assert view.get(f"/v1/artifacts/{data_ref}/content").content == digits_npz

    for p in policies.values():
        assert appr.post("/v1/policies", json=p).status_code == 201

    r = sub.post(
        "/v1/jobs",
        json={
            "mode": "retrain",
            "model_name": MODEL,
            "spec": make_spec(data_ref),
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    )
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["state"] in ("queued", "running") and job["queue"] == "gpu"
    job = svc.wait_job(job["id"])
    assert job["state"] == "succeeded", job
    assert job["verdict"] == "PASS" and job["progress"]["fraction"] == 1.0
    assert job["started_at"] and job["finished_at"] and job["duration_s"] > 0
    job_id = job["id"]

    # results: every file downloadable and well formed
    files = {f["name"]: f for f in view.get(f"/v1/jobs/{job_id}/results").json()["files"]}
    assert set(files) >= RESULTS, files
    decision = view.get(f"/v1/jobs/{job_id}/results/decision.json").json()
    assert decision["verdict"] == "PASS" and decision["policy_name"] == "e2e-loose"
    log = EvaluationLog.parse(view.get(f"/v1/jobs/{job_id}/results/log").content)
    assert log.n_tasks == 5 and not log.partial
    html = view.get(f"/v1/jobs/{job_id}/results/report.html")
    assert html.headers["content-type"].startswith("text/html") and "<html" in html.text.lower()
    assert "PASS" in view.get(f"/v1/jobs/{job_id}/results/report.md").text
    ET.fromstring(view.get(f"/v1/jobs/{job_id}/results/junit.xml").content)
    assert view.get(f"/v1/jobs/{job_id}/results/fmeca.csv").text.count("\n") >= 10  # a row per class
    assert json.loads(view.get(f"/v1/jobs/{job_id}/results/metrics.json").content)

    # /metrics: the model's gauges equal the stored decision's headline values (embedded: the API's own
    # /metrics with a viewer key; Celery: `clgate exporter`, the API replicas export per-process series)
    assert "clgate_api_info{" in view.get("/metrics").text
    headline = view.get(f"/v1/jobs/{job_id}/decision").json()["headline"]
    m = samples(svc.metrics_text())
    model = (("model", MODEL), ("project", "default"))
    assert m[("clgate_model_mica_ratio", model)] == pytest.approx(headline["mica"])
    assert m[("clgate_model_wamica_ratio", model)] == pytest.approx(headline["wamica"])
    assert m[("clgate_model_min_acc_ratio", model)] == pytest.approx(headline["min_acc"])
    assert m[("clgate_model_verdict", (("model", MODEL), ("project", "default"), ("verdict", "PASS")))] == 1.0
    worst = sorted(k for k in m if k[0] == "clgate_model_worst_class_accuracy_ratio")
    assert len(worst) == 3
    assert (
        m[
            (
                "clgate_decisions_total",
                (
                    ("project", "default"),
                    ("verdict", "PASS"),
                ),
            )
        ]
        == 1.0
    )
    assert m[("clgate_jobs", (("queue", "gpu"), ("state", "succeeded")))] == 1.0
    assert m[("clgate_job_duration_seconds_count", (("mode", "retrain"),))] == 1.0
    assert m[("clgate_workers", (("queue", "gpu"),))] >= 1.0

    # re-gate under a stricter policy: the verdict flips, no retraining, the first decision unchanged
    r = sub.post(f"/v1/jobs/{job_id}/regate", json={"policy": {"name": "e2e-strict", "version": "1"}})
    assert r.status_code == 202 and r.json()["queue"] == "cpu"
    regate = svc.wait_job(r.json()["id"], timeout=90)
    assert regate["state"] == "succeeded" and regate["verdict"] == "FAIL", regate
    assert regate["source_job_id"] == job_id
    assert view.get(f"/v1/jobs/{job_id}").json()["verdict"] == "PASS"
    regate_files = {
        f["name"]: f["sha256"] for f in view.get(f"/v1/jobs/{regate['id']}/results").json()["files"]
    }
    assert (
        regate_files["logs/log-seed0.json"] == files["logs/log-seed0.json"]["sha256"]
    )  # same log, not retrained
    m = samples(svc.metrics_text())
    assert m[("clgate_model_verdict", (("model", MODEL), ("project", "default"), ("verdict", "FAIL")))] == 1.0
    assert m[("clgate_decisions_total", (("project", "default"), ("verdict", "FAIL")))] == 1.0

    # waiver: approvers only, with a justification; recorded in the audit trail; the decision not edited
    body = {"justification": "Known weak classes; release approved for the pilot line only (QA-1234)."}
    assert sub.post(f"/v1/jobs/{regate['id']}/waivers", json=body).status_code == 403
    assert appr.post(f"/v1/jobs/{regate['id']}/waivers", json={"justification": "ok"}).status_code == 422
    assert appr.post(f"/v1/jobs/{job_id}/waivers", json=body).status_code == 409  # a PASS needs no waiver
    r = appr.post(f"/v1/jobs/{regate['id']}/waivers", json=body)
    assert r.status_code == 201, r.text
    waiver = r.json()
    d = view.get(f"/v1/jobs/{regate['id']}/decision").json()
    assert d["verdict"] == "FAIL" and [w["id"] for w in d["waivers"]] == [waiver["id"]]
    assert view.get(f"/v1/jobs/{regate['id']}").json()["waived"] is True
    events = view.get("/v1/audit", params={"subject_id": regate["id"]}).json()["data"]
    recorded = [e for e in events if e["action"] == "waiver.recorded"]
    assert len(recorded) == 1
    assert recorded[0]["actor"] == waiver["approver"] and "e2e-approver" in recorded[0]["actor"]
    assert recorded[0]["details"]["justification"] == body["justification"] and recorded[0]["at"]
    actions = {e["action"] for e in events}
    assert {"job.submitted", "job.started", "decision.recorded", "job.succeeded"} <= actions

    # baseline for the model, then a metrics-only job on the uploaded log is compared with it
    assert sub.put(f"/v1/baselines/{MODEL}", json={"job_id": job_id}).status_code == 403
    assert appr.put(f"/v1/baselines/{MODEL}", json={"job_id": job_id}).status_code == 200
    log_ref = "sha256:" + files["logs/log-seed0.json"]["sha256"]
    r = sub.post(
        "/v1/jobs",
        json={
            "mode": "metrics",
            "model_name": MODEL,
            "logs": [log_ref],
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    )
    assert r.status_code == 202, r.text
    metrics_job = svc.wait_job(r.json()["id"], timeout=90)
    assert metrics_job["state"] == "succeeded" and metrics_job["baseline_job_id"] == job_id, metrics_job
    m = samples(svc.metrics_text())
    regression = {k: v for k, v in m.items() if k[0] == "clgate_model_class_regression_ratio"}
    assert list(regression.values()) == [pytest.approx(0.0)]  # same log as the baseline
    [(_, labels)] = regression  # the class is named, for the alert
    assert dict(labels)["model"] == MODEL and dict(labels)["class_name"]
    return {"job_id": job_id, "regate_id": regate["id"], "metrics_job_id": metrics_job["id"]}


def test_embedded_end_to_end(embedded_service, digits_npz, make_spec, policies):
    scenario(embedded_service, digits_npz, make_spec, policies)


def test_celery_end_to_end(celery_service, redis_url, digits_npz, make_spec, policies, example_log):
    svc = celery_service
    ids = scenario(svc, digits_npz, make_spec, policies)

    # a redelivered job never produces a second decision: deliver the finished job again, then a
    # sentinel job behind it on the same queue (one worker process, prefetch 1: FIFO)
    from celery import Celery

    sender = Celery(broker=redis_url)
    sender.send_task("clgate.run_job", args=[ids["metrics_job_id"]], queue="cpu")
    sub, view = svc.clients["submitter"], svc.clients["viewer"]
    ref = sub.post("/v1/artifacts", params={"kind": "log"}, content=example_log).json()["ref"]
    r = sub.post(
        "/v1/jobs",
        json={
            "mode": "metrics",
            "model_name": "example",
            "logs": [ref],
            "baseline": "none",
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    )
    assert svc.wait_job(r.json()["id"], timeout=90)["state"] == "succeeded"
    events = view.get(
        "/v1/audit", params={"subject_id": ids["metrics_job_id"], "action": "decision.recorded"}
    ).json()
    assert events["count"] == 1
    m = samples(svc.metrics_text())
    assert (
        m[("clgate_decisions_total", (("project", "default"), ("verdict", "PASS")))] == 3.0
    )  # retrain, metrics-only, sentinel
    assert m[("clgate_queue_length", (("queue", "gpu"),))] == 0.0  # read from the Redis list
    sender.close()
    assert "clgate.run_job" in svc.worker.tail()


def test_embedded_cancel_keeps_partial_log(embedded_service, digits_npz, make_spec, policies):
    svc = embedded_service
    sub, view = svc.clients["submitter"], svc.clients["viewer"]
    ref = sub.post("/v1/artifacts", params={"kind": "data", "filename": "d.npz"}, content=digits_npz).json()[
        "ref"
    ]
    svc.clients["approver"].post("/v1/policies", json=policies["loose"])
    spec = make_spec(ref, iterations=100_000)
    job = sub.post(
        "/v1/jobs",
        json={
            "mode": "retrain",
            "model_name": MODEL,
            "spec": spec,
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    ).json()
    deadline = time.monotonic() + 90
    while view.get(f"/v1/jobs/{job['id']}").json()["state"] != "running":
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.2)
    assert view.post(f"/v1/jobs/{job['id']}/cancel").status_code == 403
    r = sub.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 202 and r.json()["cancel_requested"] is True
    done = svc.wait_job(job["id"], timeout=60)
    assert done["state"] == "cancelled" and done["verdict"] is None
    log = EvaluationLog.parse(view.get(f"/v1/jobs/{job['id']}/results/log").content)
    assert log.partial
    assert sub.post(f"/v1/jobs/{job['id']}/cancel").status_code == 409


def test_celery_worker_lost_mid_job_is_redelivered_and_decided_once(
    celery_service, digits_npz, make_spec, policies
):
    """acks_late + reject_on_worker_lost: kill the worker process running a job; the job is delivered
    again, runs to the end, and has exactly one decision."""
    import os
    import signal

    svc = celery_service
    sub, view = svc.clients["submitter"], svc.clients["viewer"]
    ref = sub.post("/v1/artifacts", params={"kind": "data", "filename": "d.npz"}, content=digits_npz).json()[
        "ref"
    ]
    svc.clients["approver"].post("/v1/policies", json=policies["loose"])
    job = sub.post(
        "/v1/jobs",
        json={
            "mode": "retrain",
            "model_name": MODEL,
            "spec": make_spec(ref, iterations=1500),
            "policy": {"name": "e2e-loose", "version": "1"},
        },
    ).json()
    deadline = time.monotonic() + 90
    while not (
        (state := view.get(f"/v1/jobs/{job['id']}").json())["state"] == "running"
        and (state["progress"].get("iteration") or 0) > 0
    ):
        assert time.monotonic() < deadline and state["state"] in ("queued", "running"), state
        time.sleep(0.1)
    pid = int(state["worker"].rsplit(":", 1)[1])
    assert pid != svc.worker.popen.pid  # the prefork child, not the worker's main process
    os.kill(pid, signal.SIGKILL)
    done = svc.wait_job(job["id"], timeout=150)
    assert done["state"] == "succeeded" and done["attempts"] == 2, done
    assert done["worker"] != state["worker"]
    events = view.get("/v1/audit", params={"subject_id": job["id"]}).json()["data"]
    actions = [e["action"] for e in events]
    assert actions.count("job.started") == 2 and actions.count("decision.recorded") == 1, actions


def test_clgate_serve_is_one_command_for_a_newcomer(tmp_path, example_log):
    """No settings at all but a data folder: `clgate serve` migrates, creates a first admin key in a
    mode-600 file (and says where, never printing the key), and runs jobs embedded."""
    import os
    import subprocess
    import sys

    import httpx

    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    port = _free_port()
    data = tmp_path / "data"
    out = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - held by the server process, closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "clgate", "serve", "--port", str(port), "--data-dir", str(data)],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        key_file = data / "admin.key"
        key = key_file.read_text().strip()
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
        log_text = (tmp_path / "serve.log").read_text()
        assert key not in log_text and str(key_file) in log_text  # the key goes to its file only
        with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=30) as c:
            assert c.get("/v1/whoami").json()["role"] == "global_admin"  # the first key crosses projects
            c.post(
                "/v1/policies", json={"name": "p", "rules": [{"metric": "acc", "floor": 0.5}]}
            ).raise_for_status()
            ref = c.post("/v1/artifacts", content=example_log).json()["ref"]
            job = c.post(
                "/v1/jobs",
                json={
                    "mode": "metrics",
                    "model_name": "m",
                    "logs": [ref],
                    "policy": {"name": "p", "version": "1"},
                },
            ).json()
            while (state := c.get(f"/v1/jobs/{job['id']}").json())["state"] not in ("succeeded", "failed"):
                assert time.monotonic() < deadline + 60, state
                time.sleep(0.2)
            assert state["state"] == "succeeded" and state["verdict"] in ("PASS", "WARN", "FAIL")
            assert (data / "clgate.db").is_file()
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

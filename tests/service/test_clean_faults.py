"""Clean faults: a locked database answers 503 with the reason (fast, /readyz red), orphan uploads are
swept at start, and JSON Lines logs work in metrics-only jobs (stored artifacts have no suffix)."""

from __future__ import annotations

import os
import time

from tests.fixtures.service import ADMIN_KEY

POLICY = {"name": "c", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}


def test_readyz_reports_an_unwritable_database(api):
    import sqlite3

    db = api.settings.data_dir / "clgate.db"
    holder = sqlite3.connect(db, timeout=1, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        t0 = time.monotonic()
        r = api.get("/readyz")
        assert r.status_code == 503 and "locked" in r.json()["checks"]["database"]
        r = api.post("/v1/keys", json={"name": "x", "role": "viewer"}, headers={"X-API-Key": ADMIN_KEY})
        assert r.status_code == 503 and "locked" in r.json()["reason"], r.text
        assert time.monotonic() - t0 < 60  # bounded by CLGATE_DB_BUSY_TIMEOUT_S, not a hang
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert api.get("/readyz").status_code == 200


def test_orphan_uploads_are_swept_at_start(app_factory, test_client_class):
    app, settings = app_factory()
    tmp = settings.artifact_dir / "tmp"
    tmp.mkdir(parents=True)
    orphan, live = tmp / "upload-orphan", tmp / "upload-live"
    orphan.write_bytes(b"half an upload")
    live.write_bytes(b"an upload in progress")
    old = time.time() - 2 * settings.orphan_upload_age_s
    os.utime(orphan, (old, old))
    with test_client_class(app):
        assert not orphan.exists() and live.exists()


def test_json_lines_log_in_a_metrics_job(api, example_log):
    from clgate.schemas.evaluation_log import EvaluationLog

    jsonl = EvaluationLog.parse(example_log).to_jsonl().encode()
    assert jsonl.count(b"\n") > 2
    api.post("/v1/policies", json=POLICY, headers=api.as_role("approver")).raise_for_status()
    h = api.as_role("submitter")
    ref = api.post(
        "/v1/artifacts", params={"kind": "log", "filename": "run.jsonl"}, content=jsonl, headers=h
    ).json()["ref"]
    job = api.post(
        "/v1/jobs",
        json={"mode": "metrics", "model_name": "jl", "logs": [ref], "policy": {"name": "c", "version": "1"}},
        headers=h,
    ).json()
    deadline = time.monotonic() + 120
    while (state := api.get(f"/v1/jobs/{job['id']}", headers=h).json())["state"] in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert state["state"] == "succeeded" and state["verdict"] == "PASS", state


def test_readyz_reports_pool_exhaustion(app_factory, test_client_class):
    app, settings = app_factory(api_concurrency=1, db_pool_timeout_s=1)
    with test_client_class(app) as client:
        engine = app.state.engine
        held = [engine.connect() for _ in range(settings.db_pool_size)]
        try:
            r = client.get("/readyz")
            assert r.status_code == 503 and "pool exhausted" in r.json()["checks"]["database"], r.text
            r = client.get("/v1/jobs", headers={"X-API-Key": ADMIN_KEY})
            assert r.status_code == 503 and "pool exhausted" in r.json()["reason"], r.text
        finally:
            for conn in held:
                conn.close()
        assert client.get("/readyz").status_code == 200


def test_broker_down_submission_creates_no_job(app_factory, test_client_class, example_log):
    """Celery mode with Redis unreachable: 503 naming the queue, and no job exists (atomic submission)."""
    from tests.fixtures.service import free_port

    app, _ = app_factory(broker_url=f"redis://127.0.0.1:{free_port()}/0")
    h = {"X-API-Key": ADMIN_KEY}
    with test_client_class(app) as client:
        client.post("/v1/policies", json=POLICY, headers=h).raise_for_status()
        ref = client.post("/v1/artifacts", params={"kind": "log"}, content=example_log, headers=h).json()[
            "ref"
        ]
        r = client.post(
            "/v1/jobs",
            json={
                "mode": "metrics",
                "model_name": "down",
                "logs": [ref],
                "policy": {"name": "c", "version": "1"},
            },
            headers=h,
        )
        assert r.status_code == 503 and "no job was created" in r.json()["reason"], r.text
        assert client.get("/v1/jobs", headers=h).json()["count"] == 0

"""The API under load, on real components: `clgate serve` under uvicorn (embedded executor) on SQLite and
on a real PostgreSQL server, driven by 200 concurrent HTTP clients.

Bursts of 200 concurrent reads and 200 concurrent submissions (metrics-only jobs with the example log,
to stay cheap): zero errors, and every accepted job decided exactly once. Submissions carry an
``Idempotency-Key``; a retry of each with the same key returns the same job.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from tests.fixtures.service import Service

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

N = 200
POLICY = {"name": "load", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}


def _burst(
    url: str, key: str, requests: list[tuple[str, str, dict | None, dict]]
) -> list[httpx.Response | Exception]:
    """Send every request at once, one thread each, on one shared connection pool (bounded: 120 s each)."""
    limits = httpx.Limits(max_connections=N + 10, max_keepalive_connections=N + 10)
    with httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=120, limits=limits) as client:

        def send(req):
            method, path, body, headers = req
            try:
                return client.request(method, path, json=body, headers=headers)
            except Exception as exc:
                return exc

        with ThreadPoolExecutor(max_workers=N) as pool:
            return list(pool.map(send, requests))


def _errors(responses, ok: int) -> list[str]:
    return [
        repr(r) if isinstance(r, Exception) else f"{r.status_code} {r.text[:200]}"
        for r in responses
        if isinstance(r, Exception) or r.status_code != ok
    ]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_bursts_of_200_reads_and_200_submissions(database, tmp_path, request, example_log):
    extra = {"CLGATE_EMBEDDED_WORKERS": "2"}
    if database == "postgresql":
        extra["CLGATE_DATABASE_URL"] = request.getfixturevalue("postgres_url")
    svc = Service(tmp_path, None, extra_env=extra)
    try:
        admin = svc.clients["admin"]
        admin.post("/v1/policies", json=POLICY).raise_for_status()
        ref = (
            svc.clients["submitter"]
            .post("/v1/artifacts", params={"kind": "log"}, content=example_log)
            .json()["ref"]
        )
        body = {
            "mode": "metrics",
            "model_name": "load",
            "logs": [ref],
            "policy": {"name": "load", "version": "1"},
        }
        first = svc.clients["submitter"].post("/v1/jobs", json=body)
        assert first.status_code == 202, first.text

        reads = _burst(
            svc.url,
            svc.clients["viewer"].headers["X-API-Key"],
            [("GET", f"/v1/jobs/{first.json()['id']}", None, {})] * N,
        )
        assert _errors(reads, 200) == []

        submissions = [("POST", "/v1/jobs", body, {"Idempotency-Key": f"load-{i}"}) for i in range(N)]
        key = svc.clients["submitter"].headers["X-API-Key"]
        accepted = _burst(svc.url, key, submissions)
        assert _errors(accepted, 202) == []
        ids = [r.json()["id"] for r in accepted]
        assert len(set(ids)) == N

        # a retry with the same key (the client never saw the answer) gets the same job, not a second one
        again = _burst(svc.url, key, submissions[:20])
        assert _errors(again, 202) == [] and [r.json()["id"] for r in again] == ids[:20]

        deadline = time.monotonic() + 420
        pending = set(ids) | {first.json()["id"]}
        while pending:
            assert time.monotonic() < deadline, f"{len(pending)} jobs not finished"
            listed = admin.get("/v1/jobs", params={"limit": 500, "model_name": "load"}).json()["data"]
            states = {j["id"]: j["state"] for j in listed}
            assert not [j for j in listed if j["state"] in ("failed", "cancelled")], listed
            pending = {i for i in pending if states.get(i) != "succeeded"}
            time.sleep(1.0)

        from clgate.store.models import AuditEvent, Decision, Job

        url = extra.get("CLGATE_DATABASE_URL") or f"sqlite:///{svc.data_dir / 'clgate.db'}"
        engine = create_engine(url)
        try:
            with engine.connect() as conn:
                assert (
                    conn.scalar(select(func.count()).select_from(Job)) == N + 1
                )  # no job without its client
                per_job = dict(
                    conn.execute(select(Decision.job_id, func.count()).group_by(Decision.job_id)).all()
                )
                recorded = conn.scalar(
                    select(func.count())
                    .select_from(AuditEvent)
                    .where(AuditEvent.action == "decision.recorded")
                )
        finally:
            engine.dispose()
        assert set(per_job) == set(ids) | {first.json()["id"]} and set(per_job.values()) == {1}
        assert recorded == N + 1  # decided exactly once each
        ready = httpx.get(svc.url + "/readyz", timeout=10).json()
        assert ready["status"] == "ok" and ready["checks"]["database"] == "ok", ready
    finally:
        svc.close()


def test_idempotency_key_returns_the_first_job_and_refuses_another_body(api, example_log):
    h = api.as_role("submitter")
    api.post("/v1/policies", json=POLICY, headers=api.as_role("approver")).raise_for_status()
    ref = api.post("/v1/artifacts", params={"kind": "log"}, content=example_log, headers=h).json()["ref"]
    body = {
        "mode": "metrics",
        "model_name": "idem",
        "logs": [ref],
        "policy": {"name": "load", "version": "1"},
    }
    a = api.post("/v1/jobs", json=body, headers={**h, "Idempotency-Key": "k1"})
    b = api.post("/v1/jobs", json=body, headers={**h, "Idempotency-Key": "k1"})
    assert a.status_code == b.status_code == 202 and a.json()["id"] == b.json()["id"]
    other = api.post("/v1/jobs", json={**body, "model_name": "idem2"}, headers={**h, "Idempotency-Key": "k1"})
    assert other.status_code == 422 and "Idempotency-Key" in other.json()["reason"]
    c = api.post("/v1/jobs", json=body, headers={**h, "Idempotency-Key": "k2"})
    assert c.json()["id"] != a.json()["id"]
    # the key is scoped to the API key: another submitter's "k1" is its own
    d = api.post("/v1/jobs", json=body, headers={**api.as_role("admin"), "Idempotency-Key": "k1"})
    assert d.status_code == 202 and d.json()["id"] != a.json()["id"]
    assert api.get("/v1/jobs", params={"model_name": "idem"}, headers=h).json()["count"] == 3

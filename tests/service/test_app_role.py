"""The least-privilege PostgreSQL path, with real processes: the owner role migrates and grants, the API and
a real Celery worker serve as the app role, which is ready and takes a job to a decision, yet cannot
rewrite history."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.fixtures.service import Service, base_env


def _roles(postgres_url: str, data_dir) -> str:
    """Create the app role, migrate and grant as the owner; the app role's URL."""
    owner = create_engine(postgres_url)
    with owner.begin() as conn:
        conn.execute(text("CREATE ROLE clgate_app LOGIN PASSWORD 'app-pw'"))
    owner.dispose()
    env = base_env(data_dir, CLGATE_DATABASE_URL=postgres_url)
    for argv in (["db", "upgrade"], ["db", "grant", "clgate_app"]):
        r = subprocess.run(
            [sys.executable, "-m", "clgate", *argv], env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stdout + r.stderr
    return postgres_url.replace("//clgate@", "//clgate_app:app-pw@")


@pytest.mark.integration
def test_the_app_role_is_ready_and_takes_a_job_to_a_decision(postgres_url, redis_url, tmp_path, example_log):
    app_url = _roles(postgres_url, tmp_path / "data")
    svc = Service(
        tmp_path,
        redis_url,
        extra_env={"CLGATE_DATABASE_URL": app_url, "CLGATE_AUTO_MIGRATE": "false"},
    )
    try:
        ready = httpx.get(svc.url + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["database"] == "ok"
        sub, appr = svc.clients["submitter"], svc.clients["approver"]
        policy = {"name": "pg-loose", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}
        assert appr.post("/v1/policies", json=policy).status_code == 201
        ref = sub.post("/v1/artifacts", params={"kind": "log"}, content=example_log).json()["ref"]
        r = sub.post(
            "/v1/jobs",
            json={
                "mode": "metrics",
                "model_name": "pg",
                "logs": [ref],
                "baseline": "none",
                "policy": {"name": "pg-loose", "version": "1"},
            },
        )
        assert r.status_code == 202, r.text
        job = svc.wait_job(r.json()["id"], timeout=120)
        assert job["state"] == "succeeded", job
        assert svc.clients["viewer"].get(f"/v1/jobs/{job['id']}/decision").json()["verdict"] == "PASS"
    finally:
        svc.close()
    engine = create_engine(app_url)
    for statement in ("UPDATE decisions SET verdict = 'PASS'", "DELETE FROM decisions", "TRUNCATE decisions"):
        with engine.connect() as conn, pytest.raises(Exception, match="permission denied"):
            conn.execute(text(statement))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM decisions")).scalar() == 1
    engine.dispose()


def test_readiness_names_a_schema_revision_other_than_the_codes(app_factory, test_client_class):
    from clgate.store.db import head_revision

    app, _ = app_factory()
    with test_client_class(app) as client:
        assert client.get("/readyz").status_code == 200
        engine = app.state.engine
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = 'elsewhere'"))
        r = client.get("/readyz")
        assert r.status_code == 503, r.text
        assert (
            r.json()["checks"]["database"]
            == f"schema at revision elsewhere, this code needs {head_revision()}"
        )
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head_revision()})
        assert client.get("/readyz").status_code == 200

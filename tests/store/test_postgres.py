"""The record store on a real PostgreSQL server: migrations (with the append-only triggers), the API,
a job run by the task code, and the Prometheus collector."""

from __future__ import annotations

import pytest
from sqlalchemy import text

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_service_on_postgresql(
    postgres_url, app_factory, test_client_class, admin_key, example_log, gate_example_log
):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from clgate.store.models import Base

    app, _ = app_factory(database_url=postgres_url)
    h = {"X-API-Key": admin_key}
    with test_client_class(app) as c:
        engine = app.state.engine
        assert engine.dialect.name == "postgresql"
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        job = gate_example_log(c, h, example_log)
        assert job["state"] == "succeeded" and job["verdict"] == "FAIL", job
        metrics = c.get("/metrics", headers=h).text
        assert 'clgate_model_verdict{model="pg",project="default",verdict="FAIL"} 1.0' in metrics
        assert 'clgate_decisions_total{project="default",verdict="FAIL"} 1.0' in metrics
        for statement in ("UPDATE decisions SET verdict = 'PASS'", "DELETE FROM audit_events"):
            with engine.connect() as conn, pytest.raises(Exception, match="append-only"):
                conn.execute(text(statement))
        events = c.get("/v1/audit", params={"subject_id": job["id"]}, headers=h).json()
        assert {"job.submitted", "decision.recorded", "job.succeeded"} <= {
            e["action"] for e in events["data"]
        }

"""Migration 0006b adds the jobs' ``provenance`` column (the candidate and build a job certifies) without
touching the jobs recorded before it, and its downgrade takes the column away again, keeping the jobs."""

from __future__ import annotations

import json

from alembic import command
from sqlalchemy import inspect, text

from clgate.store.db import alembic_config, make_engine, upgrade

PROVENANCE = {"candidate": {"name": "m", "version": "2.4.0"}, "build": {"ci": "gitlab", "commit": "def4567"}}


def _columns(engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns("jobs")}


def test_0006b_upgrade_and_downgrade_keep_the_jobs(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url, "0005h")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO policies (id, project, name, version, document, sha256, created_at) "
                "VALUES ('p1', 'default', 'p', '1', '{}', :sha, '2026-11-24 00:00:00')"
            ),
            {"sha": "0" * 64},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, project, mode, queue, model_name, policy_id, state, progress, "
                "cancel_requested, attempts, created_at, worker_losses) VALUES ('j1', 'default', 'metrics', "
                "'cpu', 'm', 'p1', 'queued', '{}', 0, 0, '2026-11-24 00:00:00', 0)"
            )
        )
    assert "provenance" not in _columns(engine)

    upgrade(url, "0006b")
    engine.dispose()
    assert "provenance" in _columns(engine)
    with engine.begin() as conn:
        assert conn.scalar(text("SELECT provenance FROM jobs WHERE id = 'j1'")) is None  # an older job
        conn.execute(text("UPDATE jobs SET provenance = :p WHERE id = 'j1'"), {"p": json.dumps(PROVENANCE)})
        assert json.loads(conn.scalar(text("SELECT provenance FROM jobs WHERE id = 'j1'"))) == PROVENANCE

    command.downgrade(alembic_config(url), "0005h")
    engine.dispose()
    assert "provenance" not in _columns(engine)
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT model_name FROM jobs WHERE id = 'j1'")) == "m"

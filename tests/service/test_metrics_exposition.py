"""The exposed ``/metrics`` text of the store collector, byte for byte, on a seeded store.

``data/store_metrics.prom`` was written by the collector before its names and help texts came from the
metric registry; any change to a series' name, help, labels or order shows here as a diff.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from clgate.service.metrics import exporter_registry
from clgate.store.db import make_engine, make_sessionmaker, session_scope, upgrade
from clgate.store.models import Decision, Job, Policy, WorkerHeartbeat, utcnow

GOLDEN = Path(__file__).parent / "data" / "store_metrics.prom"
T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    return make_sessionmaker(make_engine(url))


def _headline(mica: float, regression: float | None) -> dict:
    return {
        "acc": 0.9,
        "mica": mica,
        "wamica": mica + 0.05,
        "min_acc": 0.4,
        "class_regression": regression,
        "class_regression_class": "dog" if regression is not None else None,
        "worst_classes": [
            {"id": 0, "name": "cat", "accuracy": 0.2},
            {"id": 1, "name": "dog", "accuracy": 0.1},
            {"id": 2, "accuracy": 0.5},
            {"id": 3, "name": "owl", "accuracy": 0.7},
        ],
    }


def _seed(sessions) -> None:
    """Finished jobs only (no age depends on the clock), two projects, two models, one live worker."""
    with session_scope(sessions) as s:
        p = Policy(name="p", version="1", document={}, sha256="0" * 64)
        s.add(p)
        s.flush()
        rows = [
            ("default", "retrain", "alpha", "succeeded", 42.0, "FAIL", 0.3, 0.2),
            ("default", "metrics", "beta", "succeeded", 0.5, "PASS", 0.8, None),
            ("team-b", "evaluate", "gamma", "succeeded", 700.0, "WARN", 0.6, None),
            ("default", "retrain", "alpha", "failed", 3.0, None, None, None),
            ("team-b", "regate", "gamma", "cancelled", None, None, None, None),
        ]
        for i, (project, mode, model, state, duration, verdict, mica, regression) in enumerate(rows):
            job = Job(
                project=project,
                mode=mode,
                queue="gpu" if mode in ("retrain", "evaluate") else "cpu",
                model_name=model,
                policy_id=p.id,
                state=state,
                progress={},
                duration_s=duration,
                created_at=T0 + dt.timedelta(minutes=i),
            )
            s.add(job)
            s.flush()
            if verdict is not None:
                s.add(
                    Decision(
                        project=project,
                        job_id=job.id,
                        policy_id=p.id,
                        model_name=model,
                        verdict=verdict,
                        headline=_headline(mica, regression),
                        document={},
                        created_at=T0 + dt.timedelta(minutes=i, seconds=30),
                    )
                )
        s.add(WorkerHeartbeat(hostname="w1", queues="gpu,cpu", last_seen=utcnow()))
        s.add(WorkerHeartbeat(hostname="w0", queues="gpu", last_seen=T0))


def exposition(sessions) -> bytes:
    registry = exporter_registry(sessions, queue_lengths=lambda: {"gpu": 2, "cpu": 0}, worst_classes=3)
    return generate_latest(registry)


def test_store_metrics_text_is_unchanged(sessions):
    _seed(sessions)
    assert exposition(sessions).decode() == GOLDEN.read_text(encoding="utf-8")

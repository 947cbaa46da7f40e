"""Aggregates over the records, for the Prometheus collector and the embedded queue: the latest decision
per model, decisions per project and verdict, jobs per state and queue, run times, the oldest waiting
and running jobs, live workers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from clgate.schemas.vocab import JobState
from clgate.store.models import Decision, Job, WorkerHeartbeat


def latest_decisions(s: Session) -> Sequence[Any]:
    """``(model_name, verdict, headline, created_at, project)`` of each model's latest decision, by model
    name (two decisions in the same instant both appear)."""
    latest = (
        select(Decision.model_name, func.max(Decision.created_at).label("at"))
        .group_by(Decision.model_name)
        .subquery()
    )
    return s.execute(
        select(
            Decision.model_name,
            Decision.verdict,
            Decision.headline,
            Decision.created_at,
            Decision.project,
        )
        .join(latest, (latest.c.model_name == Decision.model_name) & (latest.c.at == Decision.created_at))
        .order_by(Decision.model_name)
    ).all()


def decision_counts(s: Session) -> dict[tuple[str, str], int]:
    """Decisions recorded, by ``(project, verdict)``."""
    rows = s.execute(
        select(Decision.project, Decision.verdict, func.count()).group_by(Decision.project, Decision.verdict)
    )
    return {(p, v): n for p, v, n in rows}


def job_counts(s: Session) -> dict[tuple[str, str], int]:
    """Jobs, by ``(state, queue)``."""
    rows = s.execute(select(Job.state, Job.queue, func.count()).group_by(Job.state, Job.queue))
    return {(st, q): n for st, q, n in rows}


def queued_counts(s: Session) -> dict[str, int]:
    """Queued jobs, by queue."""
    rows = s.execute(
        select(Job.queue, func.count()).where(Job.state == JobState.queued.value).group_by(Job.queue)
    )
    return {q: n for q, n in rows}


def durations(s: Session, buckets: Sequence[float]) -> dict[str, tuple[Any, ...]]:
    """Per mode, of finished jobs: ``(count, sum of seconds, count at or under each bucket bound…)``."""
    cols = [func.sum(case((Job.duration_s <= b, 1), else_=0)) for b in buckets]
    rows = s.execute(
        select(Job.mode, func.count(), func.coalesce(func.sum(Job.duration_s), 0.0), *cols)
        .where(Job.duration_s.is_not(None))
        .group_by(Job.mode)
    )
    return {r[0]: tuple(r[1:]) for r in rows}


def oldest(s: Session) -> dict[str, dt.datetime | None]:
    """When the oldest queued job was submitted and the oldest running job started."""
    return {
        "queued": s.scalar(select(func.min(Job.created_at)).where(Job.state == JobState.queued.value)),
        "running": s.scalar(select(func.min(Job.started_at)).where(Job.state == JobState.running.value)),
    }


def heartbeats(s: Session) -> Sequence[WorkerHeartbeat]:
    """Every worker's last heartbeat."""
    return s.scalars(select(WorkerHeartbeat)).all()

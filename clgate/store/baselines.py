"""Baselines: the job a model name's new jobs are compared with, set by an approver."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clgate.schemas.vocab import JobState
from clgate.store.db import audit
from clgate.store.errors import Conflict, Invalid
from clgate.store.models import Baseline, Job, JobFile, utcnow
from clgate.store.scope import Scope


def _has_log(session: Session, job_id: str) -> bool:
    return bool(
        session.scalar(select(func.count()).where(JobFile.job_id == job_id, JobFile.name.like("logs/%")))
    )


def set_baseline(session: Session, where: Scope, model_name: str, job_id: str, *, actor: str) -> Baseline:
    """Make the succeeded job ``job_id`` (its source's logs, for a re-gate) the baseline of ``model_name``."""
    job = where.job(session, job_id, act="make a baseline of")
    where.model(session, model_name)
    if job.state != JobState.succeeded.value:
        raise Conflict(f"job {job.id} is {job.state}; a baseline must be a succeeded job")
    if job.model_name != model_name:
        raise Conflict(f"job {job.id} is for model {job.model_name!r}, not {model_name!r}")
    if not job.source_job_id and not _has_log(session, job.id):
        raise Conflict(f"job {job.id} has no evaluation log to compare with")
    if job.source_job_id:  # a re-gate: its logs are its source's
        source = session.get(Job, job.source_job_id)
        assert source is not None
        job = source
    b = session.get(Baseline, model_name)
    previous = b.job_id if b else None
    if b is None:
        b = Baseline(project=where.project, model_name=model_name, job_id=job.id, set_by=actor)
        session.add(b)
    else:
        b.job_id, b.set_by, b.set_at = job.id, actor, utcnow()
    audit(
        session,
        actor,
        "baseline.set",
        "model",
        model_name,
        project=where.project,
        job_id=job.id,
        previous_job_id=previous,
    )
    return b


def all_baselines(session: Session, where: Scope) -> Sequence[Baseline]:
    """The baselines ``where`` sees, by model name."""
    return session.scalars(
        where.where(select(Baseline), Baseline.project).order_by(Baseline.model_name)
    ).all()


def get(session: Session, where: Scope, model_name: str) -> Baseline:
    return where.get(session, Baseline, model_name, f"baseline for model {model_name!r}")


def resolve(session: Session, where: Scope, choice: str, model_name: str) -> str | None:
    """The baseline job id a new job of ``model_name`` compares with: ``none``, the model's (``model``) or
    a succeeded job of this project given by id (:class:`Invalid` otherwise)."""
    if choice == "none":
        return None
    if choice == "model":
        b = session.get(Baseline, model_name)
        return b.job_id if b else None
    job = session.scalar(select(Job).where(Job.id == choice, Job.project == where.project))
    if job is None or job.state != JobState.succeeded.value:
        raise Invalid(f"baseline: job {choice} does not exist in this project or has not succeeded")
    return job.id

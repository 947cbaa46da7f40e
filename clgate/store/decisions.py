"""Gate decisions and their waivers, as the API reads and records them (decisions are recorded by the
workers, :func:`clgate.store.jobs.record_decision`; neither is ever edited)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from clgate.store import webhooks
from clgate.store.db import audit
from clgate.store.errors import Conflict, Forbidden, Invalid, NotFound
from clgate.store.keys import actor
from clgate.store.models import Decision, Job, Waiver, utcnow
from clgate.store.scope import Scope


@dataclass(frozen=True)
class DecisionView:
    """A decision as the API answers it: the record (its attributes read through) and its waivers."""

    record: Decision
    waivers: Sequence[Waiver]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.record, name)


def of_job(session: Session, where: Scope, job_id: str) -> Decision:
    """The decision of the job ``job_id`` that ``where`` sees; :class:`NotFound` (no job, or no decision)."""
    where.job(session, job_id)
    d = session.scalar(select(Decision).where(Decision.job_id == job_id))
    if d is None:
        raise NotFound(f"job {job_id} has no decision (yet)")
    return d


def view(session: Session, where: Scope, job_id: str) -> DecisionView:
    """The decision of the job ``job_id`` with its waivers, oldest first."""
    d = of_job(session, where, job_id)
    waivers = session.scalars(
        select(Waiver).where(Waiver.decision_id == d.id).order_by(Waiver.created_at)
    ).all()
    return DecisionView(d, waivers)


def waivers(session: Session, where: Scope, job_id: str) -> Sequence[Waiver]:
    """The waivers of the job ``job_id``'s decision, oldest first."""
    where.job(session, job_id)
    return session.scalars(select(Waiver).where(Waiver.job_id == job_id).order_by(Waiver.created_at)).all()


def _submitted_by(job: Job | None, key_id: str) -> bool:
    """Whether the key ``key_id`` submitted ``job`` (its ``submitted_by`` is ``key:<id>(<name>)``)."""
    return job is not None and (job.submitted_by or "").startswith(f"key:{key_id}(")


def _utc(when: dt.datetime | None) -> dt.datetime | None:
    """Stored in UTC (a time without offset is UTC)."""
    if when is None:
        return None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def waive(
    session: Session, where: Scope, job_id: str, *, justification: str, expires_at: dt.datetime | None
) -> Waiver:
    """Record ``where``'s key's justified waiver of the job's FAIL (the caller commits).

    Separation of duties: the key that submitted the job (or the job it re-gated) may not waive it.
    """
    job = where.job(session, job_id, act="waive")
    d = of_job(session, where, job_id)
    source = session.get(Job, job.source_job_id) if job.source_job_id else None
    if _submitted_by(job, where.key.id) or _submitted_by(source, where.key.id):
        raise Forbidden("separation of duties: an approver cannot waive a job they submitted (or re-gated)")
    if d.verdict != "FAIL":
        raise Conflict(f"only a FAIL can be waived; job {job_id}'s verdict is {d.verdict}")
    expires = _utc(expires_at)
    if expires is not None and expires <= utcnow():
        raise Invalid("expires_at: the waiver would have expired already")
    w = Waiver(
        project=job.project,
        decision_id=d.id,
        job_id=job_id,
        justification=justification,
        approver=actor(where.key),
        expires_at=expires,
    )
    session.add(w)
    session.flush()
    audit(
        session,
        actor(where.key),
        "waiver.recorded",
        "job",
        job_id,
        waiver_id=w.id,
        decision_id=d.id,
        verdict=d.verdict,
        justification=justification,
        expires_at=expires.isoformat() if expires else None,
    )
    webhooks.enqueue(session, job.project, "waiver", job_id, webhooks.waiver_event(job, w))
    return w

"""The queries that move a job through its life: claim, progress, finish, record, heartbeat.

The one place (with the routers' reads) that touches job rows. Workers — Celery tasks and the embedded
executor alike — call these; none of them writes SQL of its own, so every executor finishes a job the
same way and every state change leaves an audit event in the same transaction.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import exists, func, select, update
from sqlalchemy.orm import Session

from clgate.store import Store
from clgate.store.artifacts import ArtifactStore
from clgate.store.db import audit, session_scope
from clgate.store.models import Artifact, Decision, Job, JobFile, JobState, Policy, WorkerHeartbeat, as_utc, utcnow
from clgate.store.refs import find_refs


def worker_name() -> str:
    """``host:pid`` of this process (recorded on the job it runs)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class JobInputs:
    """What a worker needs to run a job, read in one session."""

    mode: str
    spec: dict[str, Any] | None
    log_refs: list[str]
    policy_document: dict[str, Any]
    model_name: str
    baseline_job_id: str | None
    source_job_id: str | None
    baseline_files: list[tuple[str, str]] = field(default_factory=list)
    source_files: list[tuple[str, str]] = field(default_factory=list)
    filenames: dict[str, str | None] = field(default_factory=dict)


def claim(store: Store, job_id: str, *, actor: str) -> int | None:
    """Mark the job running and return its attempt number; ``None`` when it is not runnable.

    One conditional UPDATE: concurrent deliveries of one job get distinct attempt numbers, and a job that
    is finished, decided or cancelled is never claimed.
    """
    with session_scope(store.sessions) as s:
        attempt = s.execute(
            update(Job)
            .where(
                Job.id == job_id,
                Job.state.in_((JobState.queued.value, JobState.running.value)),
                Job.cancel_requested.is_(False),
                ~exists().where(Decision.job_id == job_id),
            )
            .values(
                state=JobState.running.value,
                attempts=Job.attempts + 1,
                worker=worker_name(),
                started_at=func.coalesce(Job.started_at, utcnow()),
            )
            .returning(Job.attempts)
        ).scalar_one_or_none()
        if attempt is not None:
            audit(s, actor, "job.started", "job", job_id, attempt=attempt, worker=worker_name())
    return attempt


def _finish(s: Session, job: Job, state: JobState, *, error: str | None, actor: str) -> None:
    now = utcnow()
    job.state = state.value
    job.finished_at = now
    job.error = error
    started = as_utc(job.started_at)
    job.duration_s = (now - started).total_seconds() if started else None
    audit(s, actor, f"job.{state.value}", "job", job.id, error=error, attempt=job.attempts)


def finish(store: Store, job_id: str, state: JobState, *, error: str | None, actor: str) -> JobState | None:
    """Put a job that is not yet terminal into ``state`` (the one finishing path); returns its final state."""
    with session_scope(store.sessions) as s:
        job = s.get(Job, job_id)
        if job is None:
            return None
        if not JobState(job.state).terminal:
            _finish(s, job, state, error=error, actor=actor)
        return JobState(job.state)


def settle_unclaimed(store: Store, job_id: str, *, actor: str) -> str:
    """Why a delivery did not run the job (finished, decided, cancelled or missing); settles what it can."""
    with session_scope(store.sessions) as s:
        job = s.get(Job, job_id)
        if job is None:
            return "missing"
        if JobState(job.state).terminal:
            return job.state  # a redelivery after it finished
        if s.scalar(select(Decision.id).where(Decision.job_id == job_id)) is not None:
            _finish(s, job, JobState.succeeded, error=None, actor=actor)
            return JobState.succeeded.value
        if job.cancel_requested:
            _finish(s, job, JobState.cancelled, error="cancelled before it started", actor=actor)
            return JobState.cancelled.value
        return job.state


def attempts(store: Store, job_id: str) -> int:
    with store.sessions() as s:
        return s.scalar(select(Job.attempts).where(Job.id == job_id)) or 0


def pending_jobs(store: Store) -> list[str]:
    """Jobs recorded as queued or running, oldest first (an executor that starts takes them back)."""
    with store.sessions() as s:
        return list(
            s.scalars(
                select(Job.id)
                .where(Job.state.in_([JobState.queued.value, JobState.running.value]))
                .order_by(Job.created_at)
            )
        )


def _log_files(s: Session, job_id: str) -> list[tuple[str, str]]:
    rows = s.execute(
        select(JobFile.name, JobFile.sha256).where(JobFile.job_id == job_id, JobFile.name.like("logs/%"))
    ).all()
    return sorted((name, sha) for name, sha in rows)


def load_inputs(store: Store, job_id: str) -> JobInputs:
    """The job's mode, spec, logs, policy and the files of its baseline and source jobs."""
    with store.sessions() as s:
        job = s.get(Job, job_id)
        if job is None:
            raise LookupError(f"job {job_id} does not exist")
        refs = list(find_refs(job.spec)) if job.spec else []
        filenames = dict(
            s.execute(select(Artifact.sha256, Artifact.filename).where(Artifact.sha256.in_(refs))).all()
        )
        return JobInputs(
            mode=job.mode,
            spec=job.spec,
            log_refs=list(job.logs or []),
            policy_document=s.get(Policy, job.policy_id).document,
            model_name=job.model_name,
            baseline_job_id=job.baseline_job_id,
            source_job_id=job.source_job_id,
            baseline_files=_log_files(s, job.baseline_job_id) if job.baseline_job_id else [],
            source_files=_log_files(s, job.source_job_id) if job.source_job_id else [],
            filenames=filenames,
        )


def cancel_requested(store: Store, job_id: str) -> bool:
    with store.sessions() as s:
        return bool(s.scalar(select(Job.cancel_requested).where(Job.id == job_id)))


def save_progress(store: Store, job_id: str, progress: dict[str, Any]) -> None:
    """Record a running job's progress (ignored once the job left ``running``)."""
    if not progress:
        return
    with session_scope(store.sessions) as s:
        job = s.get(Job, job_id)
        if job is not None and job.state == JobState.running.value:
            job.progress = progress


def _register_files(s: Session, artifacts: ArtifactStore, stored: dict[str, str], job_id: str) -> None:
    existing = set(s.scalars(select(JobFile.name).where(JobFile.job_id == job_id)))
    for name, sha in stored.items():
        if s.get(Artifact, sha) is None:
            size = artifacts.path(sha).stat().st_size
            s.add(Artifact(sha256=sha, size=size, kind="result", filename=Path(name).name, created_by="worker"))
            s.flush()
        if name not in existing:
            s.add(JobFile(job_id=job_id, name=name, sha256=sha))


def attach_files(store: Store, job_id: str, stored: dict[str, str]) -> None:
    """Register stored files (``name → sha256``) as the job's files (logs of a failed or cancelled run)."""
    with session_scope(store.sessions) as s:
        _register_files(s, store.artifacts, stored, job_id)


def record_decision(
    store: Store, job_id: str, stored: dict[str, str], verdict: str, document: dict[str, Any], *, actor: str
) -> tuple[JobState, str | None]:
    """Store the job's files and its one decision, and mark it succeeded.

    Raises ``sqlalchemy.exc.IntegrityError`` when another delivery recorded the decision first (the unique
    key on ``decisions.job_id``).
    """
    with session_scope(store.sessions) as s:
        job = s.get(Job, job_id)
        if JobState(job.state).terminal:
            return JobState(job.state), job.error
        _register_files(s, store.artifacts, stored, job_id)
        if s.scalar(select(Decision.id).where(Decision.job_id == job_id)) is None:
            s.add(
                Decision(
                    job_id=job_id,
                    policy_id=job.policy_id,
                    model_name=job.model_name,
                    verdict=verdict,
                    headline=document.get("headline") or {},
                    document=document,
                )
            )
            s.flush()  # the unique key on job_id refuses a second decision here
            audit(s, actor, "decision.recorded", "job", job_id, verdict=verdict, policy_id=job.policy_id)
        job.progress = {**(job.progress or {}), "fraction": 1.0}
        _finish(s, job, JobState.succeeded, error=None, actor=actor)
    return JobState.succeeded, None


def job_state(store: Store, job_id: str) -> tuple[JobState, str | None]:
    with store.sessions() as s:
        job = s.get(Job, job_id)
        return JobState(job.state), job.error


# ---------------------------------------------------------------------- heartbeats
def beat(store: Store, hostname: str, queues: str) -> None:
    """Record ``hostname`` as alive and consuming ``queues`` now."""
    with session_scope(store.sessions) as s:
        row = s.get(WorkerHeartbeat, hostname)
        if row is None:
            s.add(WorkerHeartbeat(hostname=hostname, queues=queues, last_seen=utcnow()))
        else:
            row.queues, row.last_seen = queues, utcnow()


def forget(store: Store, hostname: str) -> None:
    with session_scope(store.sessions) as s:
        row = s.get(WorkerHeartbeat, hostname)
        if row is not None:
            s.delete(row)

"""The queries of job rows: submit, read, cancel (the API); claim, progress, finish, record, heartbeat
(the workers).

The one place that touches job rows. Workers — Celery tasks and the embedded executor alike — and the
API's routes call these; none of them writes SQL of its own, so every executor finishes a job the same
way and every state change leaves an audit event in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Row,
    Select,
    Update,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from clgate.store import Store, webhooks
from clgate.store.artifacts import ArtifactStore
from clgate.store.db import audit, session_scope
from clgate.store.errors import Conflict, Invalid, NotFound
from clgate.store.models import (
    Artifact,
    Decision,
    Job,
    JobFile,
    JobState,
    Policy,
    Waiver,
    WorkerHeartbeat,
    as_utc,
    utcnow,
)
from clgate.store.refs import find_refs
from clgate.store.scope import Scope, filtered, total


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
    provenance: dict[str, Any] = field(default_factory=dict)  # candidate and build (clgate.schemas.api)


def claim(store: Store, job_id: str, *, actor: str, max_losses: int | None = None) -> int | None:
    """Mark the job running and return its attempt number; ``None`` when it is not runnable.

    One conditional UPDATE: concurrent deliveries of one job get distinct attempt numbers, and a job that
    is finished, decided or cancelled is never claimed, nor one whose worker still records heartbeats (a
    duplicate message while it runs). A job found ``running`` with a silent worker lost that worker (a
    crash, a kill): that counts as a worker loss, and a job that has lost ``max_losses`` workers is not
    claimed (:func:`settle_unclaimed` fails it with the reason).
    """
    cap = max_losses if max_losses is not None else store.settings.max_worker_losses
    lost = case((Job.state == JobState.running.value, 1), else_=0)
    now = utcnow()
    stale = now - dt.timedelta(seconds=store.settings.worker_stale_s)
    hard_limit = now - dt.timedelta(seconds=store.settings.job_time_limit_s)
    with session_scope(store.sessions) as s:
        attempt = s.execute(
            update(Job)
            .where(
                Job.id == job_id,
                or_(
                    Job.state == JobState.queued.value,
                    # running, but its worker went silent: a redelivery after a crash takes it over
                    (Job.state == JobState.running.value)
                    & or_(Job.heartbeat_at.is_(None), Job.heartbeat_at < stale)
                    # … unless that attempt ran past the hard time limit (killed for it: failed, not rerun)
                    & or_(Job.claimed_at.is_(None), Job.claimed_at > hard_limit),
                ),
                Job.cancel_requested.is_(False),
                Job.worker_losses + lost < cap,
                ~exists().where(Decision.job_id == job_id),
            )
            .values(
                state=JobState.running.value,
                attempts=Job.attempts + 1,
                worker_losses=Job.worker_losses + lost,
                worker=worker_name(),
                started_at=func.coalesce(Job.started_at, now),
                claimed_at=now,
                heartbeat_at=now,
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


def finish(
    store: Store, job_id: str, state: JobState, *, error: str | None, actor: str, attempt: int | None = None
) -> JobState | None:
    """Put a job that is not yet terminal into ``state`` (the one finishing path); returns its final state.

    With ``attempt``, only while that attempt still owns the job (running, same attempt number): a worker
    whose job was re-queued or failed by the reaper meanwhile changes nothing.
    """
    with session_scope(store.sessions) as s:
        job = s.get(Job, job_id)
        if job is None:
            return None
        owned = attempt is None or (job.state == JobState.running.value and job.attempts == attempt)
        if owned and not JobState(job.state).terminal:
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
        if job.state == JobState.running.value and _alive(store, job):
            return job.state  # a duplicate delivery: the job's worker is alive and runs it
        running_s = _running_s(job)
        if job.state == JobState.running.value and running_s > store.settings.job_time_limit_s:
            _finish(s, job, JobState.failed, error=hard_limit_reason(store, running_s), actor=actor)
            return JobState.failed.value
        losses = job.worker_losses + (1 if job.state == JobState.running.value else 0)
        if losses >= store.settings.max_worker_losses:
            job.worker_losses = losses
            error = (
                f"crashed the worker {losses} times "
                f"(CLGATE_MAX_WORKER_LOSSES={store.settings.max_worker_losses}); "
                "not run again"
            )
            _finish(s, job, JobState.failed, error=error, actor=actor)
            return JobState.failed.value
        return job.state


def _run(s: Session, statement: Update) -> CursorResult[Any]:
    """Execute an UPDATE (its result counts the rows it changed)."""
    return cast("CursorResult[Any]", s.execute(statement))


def hard_limit_reason(store: Store, running_s: float) -> str:
    return (
        f"hard time limit exceeded: ran {running_s:.0f} s "
        f"(CLGATE_JOB_TIME_LIMIT_S={store.settings.job_time_limit_s})"
    )


def _running_s(job: Job) -> float:
    claimed = as_utc(job.claimed_at or job.started_at)
    return (utcnow() - claimed).total_seconds() if claimed else 0.0


def _alive(store: Store, job: Job) -> bool:
    last = as_utc(job.heartbeat_at)
    return last is not None and (utcnow() - last).total_seconds() <= store.settings.worker_stale_s


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
            policy_document=s.get_one(Policy, job.policy_id).document,
            model_name=job.model_name,
            baseline_job_id=job.baseline_job_id,
            source_job_id=job.source_job_id,
            baseline_files=_log_files(s, job.baseline_job_id) if job.baseline_job_id else [],
            source_files=_log_files(s, job.source_job_id) if job.source_job_id else [],
            filenames=filenames,
            provenance=dict(job.provenance or {}),
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
            s.add(
                Artifact(sha256=sha, size=size, kind="result", filename=Path(name).name, created_by="worker")
            )
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
        job = s.get_one(Job, job_id)
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
            audit(
                s,
                actor,
                "decision.recorded",
                "job",
                job_id,
                verdict=verdict,
                policy_id=job.policy_id,
                **provenance_details(job.provenance),
            )
            webhooks.enqueue(s, job.project, "decision", job_id, decision_event(job, verdict, document))
        job.progress = {**(job.progress or {}), "fraction": 1.0}
        _finish(s, job, JobState.succeeded, error=None, actor=actor)
    return JobState.succeeded, None


def provenance_details(provenance: dict[str, Any] | None) -> dict[str, Any]:
    """The candidate and build of a job's provenance as flat audit-event fields (only those it names).

    >>> provenance_details({"candidate": {"name": "digits-mlp", "version": "2.4.0"},
    ...                     "build": {"ci": "github", "commit": "1f2e3d4", "run_url": None}})
    {'candidate': 'digits-mlp', 'candidate_version': '2.4.0', 'commit': '1f2e3d4', 'ci': 'github'}
    """
    candidate = (provenance or {}).get("candidate") or {}
    build = (provenance or {}).get("build") or {}
    fields = {
        "candidate": candidate.get("name"),
        "candidate_version": candidate.get("version"),
        "commit": build.get("commit"),
        "ci": build.get("ci"),
        "run_url": build.get("run_url"),
        "ref": build.get("ref"),
    }
    return {k: v for k, v in fields.items() if v is not None}


def decision_event(job: Job, verdict: str, document: dict[str, Any]) -> dict[str, Any]:
    """The webhook event of a job's decision (what a receiver needs to act; the rest is one GET away):
    with the candidate's version and build (``candidate_version``, ``build``) when the job names them."""
    policy = f"{document.get('policy_name')}@{document.get('policy_version')}"
    event = {
        "project": job.project,
        "job_id": job.id,
        "model_name": job.model_name,
        "verdict": verdict,
        "summary": document.get("summary"),
        "policy": policy,
        "headline": document.get("headline") or {},
        "decided_at": utcnow().isoformat(),
    }
    provenance = job.provenance or {}
    candidate = provenance.get("candidate") or {}
    if candidate.get("name"):
        event["candidate"] = candidate["name"]
    if candidate.get("version"):
        event["candidate_version"] = candidate["version"]
    if provenance.get("build"):
        event["build"] = provenance["build"]
    return event


def job_state(store: Store, job_id: str) -> tuple[JobState, str | None]:
    with store.sessions() as s:
        job = s.get_one(Job, job_id)
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


# ---------------------------------------------------------------------- job heartbeats, reaper, reconciler
def beat_job(store: Store, job_id: str, attempt: int) -> bool:
    """Record that attempt ``attempt`` of a running job is alive; ``False`` once the job left that attempt."""
    with session_scope(store.sessions) as s:
        result = _run(
            s,
            update(Job)
            .where(Job.id == job_id, Job.state == JobState.running.value, Job.attempts == attempt)
            .values(heartbeat_at=utcnow()),
        )
        return result.rowcount == 1


def release(store: Store, job_id: str, attempt: int, *, reason: str, actor: str) -> bool:
    """Put attempt ``attempt`` of a running job back to ``queued`` (a transient fault, retried): no worker
    loss."""
    with session_scope(store.sessions) as s:
        result = _run(
            s,
            update(Job)
            .where(Job.id == job_id, Job.state == JobState.running.value, Job.attempts == attempt)
            .values(state=JobState.queued.value, heartbeat_at=None),
        )
        if result.rowcount == 1:
            audit(s, actor, "job.retry", "job", job_id, attempt=attempt, reason=reason)
            return True
    return False


@dataclass
class Reaped:
    """What one pass of :func:`reap` did: jobs put back in the queue and jobs failed (with their reasons)."""

    requeued: list[tuple[str, str]] = field(default_factory=list)  # (job id, queue)
    failed: list[tuple[str, str, str | None]] = field(default_factory=list)  # (job id, reason, worker)


def reap(store: Store, *, actor: str, assume_lost: bool = False) -> Reaped:
    """Settle running jobs nobody runs any more.

    A job running longer than the hard time limit (``CLGATE_JOB_TIME_LIMIT_S``, plus one stale period for
    the worker to record it) is failed with that reason. A job whose worker has not recorded a heartbeat
    for ``CLGATE_WORKER_STALE_S`` lost its worker: it is queued again, or failed once it has lost
    ``CLGATE_MAX_WORKER_LOSSES`` workers (``assume_lost``: every running job lost its worker — the
    embedded executor starting again). Every change is one conditional UPDATE on the attempt number,
    so a worker that comes back, or another API replica reaping at once, never causes a second run.
    """
    settings = store.settings
    now = utcnow()
    out = Reaped()
    with store.sessions() as s:
        rows = s.execute(
            select(
                Job.id,
                Job.queue,
                Job.attempts,
                Job.worker_losses,
                Job.claimed_at,
                Job.started_at,
                Job.heartbeat_at,
                Job.worker,
            ).where(Job.state == JobState.running.value)
        ).all()
    for job_id, queue, attempt, losses, claimed_at, started_at, heartbeat_at, worker in rows:
        claimed = as_utc(claimed_at or started_at)
        last = as_utc(heartbeat_at or claimed_at or started_at)
        running_s = (now - claimed).total_seconds() if claimed else 0.0
        silent_s = (now - last).total_seconds() if last else float("inf")
        past_limit = running_s > settings.job_time_limit_s
        if past_limit and (
            silent_s > settings.worker_stale_s
            or running_s > settings.job_time_limit_s + settings.worker_stale_s
        ):
            # killed at the limit (silent since), or still not done one stale period after it
            reason = hard_limit_reason(store, running_s)
            if _settle_attempt(store, job_id, attempt, JobState.failed, reason, losses, actor):
                out.failed.append((job_id, reason, worker))
        elif not past_limit and (assume_lost or silent_s > settings.worker_stale_s):
            lost = losses + 1
            if lost >= settings.max_worker_losses:
                reason = (
                    f"crashed the worker {lost} times (last: no heartbeat from {worker} for "
                    f"{silent_s:.0f} s; CLGATE_MAX_WORKER_LOSSES={settings.max_worker_losses})"
                )
                if _settle_attempt(store, job_id, attempt, JobState.failed, reason, lost, actor):
                    out.failed.append((job_id, reason, worker))
            elif _settle_attempt(
                store,
                job_id,
                attempt,
                JobState.queued,
                f"no heartbeat from {worker} for {silent_s:.0f} s",
                lost,
                actor,
            ):
                out.requeued.append((job_id, queue))
    return out


def _settle_attempt(
    store: Store, job_id: str, attempt: int, state: JobState, reason: str, losses: int, actor: str
) -> bool:
    with session_scope(store.sessions) as s:
        job = s.get(Job, job_id, with_for_update=store.engine.dialect.name == "postgresql")
        if job is None or job.state != JobState.running.value or job.attempts != attempt:
            return False  # its worker finished, or another reaper or delivery moved it
        job.worker_losses = losses
        if state is JobState.queued:
            job.state, job.heartbeat_at = JobState.queued.value, None
            audit(s, actor, "job.requeued", "job", job_id, attempt=attempt, reason=reason)
        else:
            _finish(s, job, state, error=reason, actor=actor)
    return True


def queued_jobs(store: Store, *, older_than_s: float) -> list[tuple[str, str]]:
    """``(id, queue)`` of jobs recorded as queued for longer than ``older_than_s`` seconds (oldest first)."""
    cutoff = utcnow().timestamp() - older_than_s
    with store.sessions() as s:
        rows = s.execute(
            select(Job.id, Job.queue, Job.created_at)
            .where(Job.state == JobState.queued.value)
            .order_by(Job.created_at)
        ).all()
    return [(job_id, queue) for job_id, queue, created in rows if as_utc(created).timestamp() <= cutoff]


# ---------------------------------------------------------------------- the API's reads and writes
class PolicyName(NamedTuple):
    name: str
    version: str


@dataclass(frozen=True)
class JobView:
    """A job as the API answers it: the record (its attributes read through), its policy's name and
    version, its verdict (once decided) and whether a waiver of it is in force."""

    record: Job
    policy: PolicyName
    verdict: str | None
    waived: bool

    def __getattr__(self, name: str) -> Any:
        return getattr(self.record, name)


def waiver_in_force() -> ColumnElement[bool]:
    """A waiver counts while it has not expired (one that expired sets ``waived`` no more); "now" is
    taken when the statement runs, so a statement built once stays right."""
    now = bindparam("waiver_now", callable_=utcnow, type_=Waiver.expires_at.type)
    return (Waiver.expires_at.is_(None)) | (Waiver.expires_at > now)


@functools.cache
def _all_views() -> Select:
    """The job views of every project, built once: building this statement cost more than running it
    (a status read's largest cost in the store); a scope then adds one condition."""
    waived = exists().where(Waiver.job_id == Job.id, waiver_in_force())
    return (
        select(Job, Policy.name, Policy.version, Decision.verdict, waived.label("waived"))
        .join(Policy, Policy.id == Job.policy_id)
        .outerjoin(Decision, Decision.job_id == Job.id)
    )


def _views(where: Scope) -> Select:
    return where.where(_all_views(), Job.project)


def _view(row: Row) -> JobView:
    job, policy_name, policy_version, verdict, waived = row
    return JobView(job, PolicyName(policy_name, policy_version), verdict, bool(waived))


def view(session: Session, where: Scope, job_id: str) -> JobView:
    """The job ``job_id`` as ``where`` sees it; :class:`NotFound` otherwise."""
    row = session.execute(_views(where).where(Job.id == job_id)).first()
    if row is None:
        raise NotFound(f"no job {job_id}")
    return _view(row)


def page(
    session: Session,
    where: Scope,
    *,
    state: str | None = None,
    mode: str | None = None,
    model_name: str | None = None,
    verdict: str | None = None,
    skip: int = 0,
    limit: int = 100,
) -> tuple[list[JobView], int]:
    """One page of the jobs ``where`` sees (newest first), with the filters, and the total."""
    q = filtered(
        _views(where),
        (Job.state, state),
        (Job.mode, mode),
        (Job.model_name, model_name),
        (Decision.verdict, verdict),
    )
    count = total(session, q)
    rows = session.execute(q.order_by(Job.created_at.desc(), Job.id).offset(skip).limit(limit)).all()
    return [_view(r) for r in rows], count


def idempotent(
    session: Session, key_id: str, header: str | None, request: dict[str, Any]
) -> tuple[str | None, str | None, Job | None]:
    """(stored key, request digest, the job an earlier request with this ``Idempotency-Key`` created)."""
    if header is None:
        return None, None, None
    if not header or len(header) > 200 or not header.isprintable():
        raise Invalid("Idempotency-Key: must be 1 to 200 printable characters")
    scoped = f"{key_id}:{header}"
    digest = hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()
    earlier = session.scalar(select(Job).where(Job.idempotency_key == scoped))
    if earlier is not None and earlier.request_sha256 != digest:
        raise Invalid("Idempotency-Key: already used for a different request (use a new key per request)")
    return scoped, digest, earlier


def insert(session: Session, job: Job, *, actor: str, details: dict[str, Any]) -> tuple[Job, bool]:
    """Add a new job with its ``job.submitted`` event (not committed): ``(job, True)``; or, when a concurrent
    request with the same ``Idempotency-Key`` created it first, ``(that job, False)``."""
    session.add(job)
    try:
        session.flush()
    except IntegrityError:  # the same Idempotency-Key submitted concurrently: the other request created it
        session.rollback()
        earlier = session.scalar(select(Job).where(Job.idempotency_key == job.idempotency_key))
        if earlier is None or earlier.request_sha256 != job.request_sha256:
            raise Conflict("Idempotency-Key: a concurrent request with this key is being processed") from None
        return earlier, False
    audit(session, actor, "job.submitted", "job", job.id, **details)
    return job, True


def regate_source(session: Session, where: Scope, job_id: str) -> Job:
    """The job whose logs a re-gate of ``job_id`` gates again: ``job_id`` itself, or its own source when it
    is a re-gate; it must have succeeded (:class:`Conflict`)."""
    source = where.job(session, job_id, act="re-gate")
    if source.state != JobState.succeeded.value:
        raise Conflict(f"job {job_id} is {source.state}; only a succeeded job can be gated again")
    if source.mode == "regate" and source.source_job_id:
        source = where.job(session, source.source_job_id)
    return source


def cancel(session: Session, where: Scope, job_id: str, *, actor: str) -> None:
    """Ask for the job to stop (a queued job is cancelled at once); the caller commits."""
    job = where.job(session, job_id)
    if JobState(job.state).terminal:
        raise Conflict(f"job {job_id} already {job.state}")
    job.cancel_requested = True
    audit(session, actor, "job.cancel_requested", "job", job_id, state=job.state)
    if job.state == JobState.queued.value:
        job.state, job.error = JobState.cancelled.value, "cancelled before it started"
        job.finished_at = utcnow()
        audit(session, actor, "job.cancelled", "job", job_id)


@dataclass(frozen=True)
class ResultFile:
    """A result file of a job, and where the API serves it."""

    job_id: str
    name: str
    sha256: str
    size: int

    @property
    def url(self) -> str:
        return f"/v1/jobs/{self.job_id}/results/{self.name}"


def result_files(session: Session, where: Scope, job_id: str) -> list[ResultFile]:
    """The result files of the job ``job_id`` that ``where`` sees, by name."""
    where.job(session, job_id)
    rows = session.execute(
        select(JobFile.name, JobFile.sha256, Artifact.size)
        .join(Artifact, Artifact.sha256 == JobFile.sha256)
        .where(JobFile.job_id == job_id)
        .order_by(JobFile.name)
    ).all()
    return [ResultFile(job_id, name, sha, size) for name, sha, size in rows]


def result_file(session: Session, where: Scope, job_id: str, name: str) -> JobFile:
    """The result ``name`` of the job ``job_id`` (``log``: its first evaluation log); :class:`NotFound`."""
    where.job(session, job_id)
    row: JobFile | None
    if name == "log":  # the first (or only) evaluation log
        row = session.scalar(
            select(JobFile)
            .where(JobFile.job_id == job_id, JobFile.name.like("logs/%"))
            .order_by(JobFile.name)
            .limit(1)
        )
    else:
        row = session.get(JobFile, (job_id, name))
    if row is None:
        raise NotFound(f"job {job_id} has no result {name!r} (see /v1/jobs/{job_id}/results)")
    return row

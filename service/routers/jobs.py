"""Jobs: submit (202 + id), get, list with filters and pagination, cancel, results, decision, re-gate,
waivers."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import mimetypes
from typing import Annotated

from fastapi import APIRouter, Header, Query, status
from fastapi.responses import FileResponse
from sqlalchemy import Select, exists, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from clgate.schemas.api import (
    DecisionPublic,
    JobCreate,
    JobProgress,
    JobPublic,
    JobsPublic,
    Mode,
    PolicyRef,
    RegateCreate,
    ResultFilePublic,
    ResultsPublic,
    State,
    Verdict,
    WaiverCreate,
    WaiverPublic,
    queue_for,
)
from clgate.schemas.job import JobSpec, JobSpecError
from clgate.service.deps import (
    Approver,
    DispatcherDep,
    Scope,
    SessionDep,
    StoreDep,
    Submitter,
    Viewer,
    actor,
    scope,
)
from clgate.service.errors import ApiError
from clgate.service.limits import MAX_SKIP
from clgate.service.routers.policies import find as find_policy
from clgate.store import webhooks
from clgate.store.artifacts import ArtifactNotFound, ArtifactStore
from clgate.store.db import audit
from clgate.store.models import (
    Artifact,
    Baseline,
    Decision,
    Job,
    JobFile,
    JobState,
    Policy,
    Waiver,
    as_utc,
    utcnow,
)
from clgate.store.refs import check_paths, find_refs, resolve_refs

log = logging.getLogger("clgate.api")
router = APIRouter(prefix="/jobs", tags=["jobs"])

MEDIA = {
    ".md": "text/markdown; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".xml": "application/xml",
    ".html": "text/html; charset=utf-8",
}


def waiver_in_force():
    """A waiver counts while it has not expired (one that expired sets ``waived`` no more)."""
    return (Waiver.expires_at.is_(None)) | (Waiver.expires_at > utcnow())


def _query() -> Select:
    waived = exists().where(Waiver.job_id == Job.id, waiver_in_force())
    return (
        select(Job, Policy.name, Policy.version, Decision.verdict, waived.label("waived"))
        .join(Policy, Policy.id == Job.policy_id)
        .outerjoin(Decision, Decision.job_id == Job.id)
    )


def _public(row) -> JobPublic:
    job, policy_name, policy_version, verdict, waived = row
    return JobPublic(
        id=job.id,
        mode=job.mode,
        queue=job.queue,
        model_name=job.model_name,
        state=job.state,
        progress=JobProgress(**(job.progress or {})),
        policy=PolicyRef(name=policy_name, version=policy_version),
        policy_id=job.policy_id,
        baseline_job_id=job.baseline_job_id,
        source_job_id=job.source_job_id,
        cancel_requested=job.cancel_requested,
        attempts=job.attempts,
        error=job.error,
        submitted_by=job.submitted_by,
        worker=job.worker,
        created_at=as_utc(job.created_at),
        started_at=as_utc(job.started_at),
        finished_at=as_utc(job.finished_at),
        duration_s=job.duration_s,
        verdict=verdict,
        waived=bool(waived),
        project=job.project,
    )


def load_public(session: Session, job_id: str, where: Scope) -> JobPublic:
    row = session.execute(where.where(_query().where(Job.id == job_id), Job.project)).first()
    if row is None:
        raise ApiError(404, f"no job {job_id}")
    return _public(row)


def _baseline(session: Session, where: Scope, choice: str, model_name: str) -> str | None:
    if choice == "none":
        return None
    if choice == "model":
        b = session.get(Baseline, model_name)
        return b.job_id if b else None
    job = session.scalar(select(Job).where(Job.id == choice, Job.project == where.project))
    if job is None or job.state != JobState.succeeded.value:
        raise ApiError(422, f"baseline: job {choice} does not exist in this project or has not succeeded")
    return job.id


def _check_spec(session: Session, store: ArtifactStore, where: Scope, body: JobCreate) -> dict:
    spec = dict(body.spec or {})
    spec.setdefault("mode", body.mode)
    if spec["mode"] != body.mode:
        raise ApiError(422, f"spec.mode is {spec['mode']!r} but the job's mode is {body.mode!r}")
    problems = check_paths(spec)
    try:
        refs = set(find_refs(spec))
    except ValueError as exc:
        problems.append(f"spec: {exc}")
        refs = set()
    missing = sorted(r for r in refs if where.artifact(session, r) is None)
    problems += [f"spec: artifact sha256:{r} does not exist (upload it first)" for r in missing]
    if problems:
        raise ApiError(422, problems[0], problems=problems)
    try:
        JobSpec.parse(resolve_refs(spec, lambda digest: str(store.path(digest))))
    except JobSpecError as exc:
        problems = [f"spec.{p}" for p in exc.problems]
        raise ApiError(422, problems[0], problems=problems) from None
    return spec


def _enqueue(session: Session, dispatcher, job: Job, who: str) -> None:
    """Record the job and hand it to the executor, atomically for the client: it gets the id or no job exists.

    Celery: the message is sent inside the transaction that inserts the job and the transaction commits
    after; a failed send rolls back (503, no job), and a message that arrives before the commit waits for
    it (:data:`clgate.workers.runner.MISSING_GRACE_S`). Embedded: the job is committed, then submitted;
    if that fails it stays queued and the supervisor submits it again.
    """
    if dispatcher.kind == "embedded":
        session.commit()
        try:
            dispatcher.submit(job.id, job.queue)
        except Exception:
            log.warning("job %s: not handed to the executor yet; the supervisor will", job.id, exc_info=True)
        return
    try:
        dispatcher.submit(job.id, job.queue)
    except Exception as exc:
        session.rollback()
        raise ApiError(
            503, f"the job queue is unavailable ({type(exc).__name__}); no job was created"
        ) from None
    session.commit()


def _idempotent(
    session: Session, key, header: str | None, request: dict
) -> tuple[str | None, str | None, Job | None]:
    """(stored key, request digest, the job an earlier request with this ``Idempotency-Key`` created)."""
    if header is None:
        return None, None, None
    if not header or len(header) > 200 or not header.isprintable():
        raise ApiError(422, "Idempotency-Key: must be 1 to 200 printable characters")
    scoped = f"{key.id}:{header}"
    digest = hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()
    earlier = session.scalar(select(Job).where(Job.idempotency_key == scoped))
    if earlier is not None and earlier.request_sha256 != digest:
        raise ApiError(
            422, "Idempotency-Key: already used for a different request (use a new key per request)"
        )
    return scoped, digest, earlier


def _create(session: Session, dispatcher, job: Job, who: str, where: Scope, audit_fields: dict) -> JobPublic:
    session.add(job)
    try:
        session.flush()
    except IntegrityError:  # the same Idempotency-Key submitted concurrently: the other request created it
        session.rollback()
        earlier = session.scalar(select(Job).where(Job.idempotency_key == job.idempotency_key))
        if earlier is None or earlier.request_sha256 != job.request_sha256:
            raise ApiError(
                409, "Idempotency-Key: a concurrent request with this key is being processed"
            ) from None
        return load_public(session, earlier.id, where)
    audit(session, who, "job.submitted", "job", job.id, **audit_fields)
    _enqueue(session, dispatcher, job, who)
    return load_public(session, job.id, where)


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="A retry with the same key (and the same body) returns the job "
        "the first request created instead of a second job.",
    ),
]


@router.post(
    "",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Submit a job (retrain, evaluate or metrics-only)",
)
def submit_job(
    body: JobCreate,
    session: SessionDep,
    store: StoreDep,
    dispatcher: DispatcherDep,
    key: Submitter,
    idempotency_key: IdempotencyKey = None,
):
    where = scope(key)
    scoped, digest, earlier = _idempotent(
        session, key, idempotency_key, {"submit": body.model_dump(mode="json")}
    )
    if earlier is not None:
        return load_public(session, earlier.id, where)
    where.model(session, body.model_name, claim=True)
    policy = find_policy(session, body.policy, where.project)
    spec = None
    if body.mode == "metrics":
        missing = [r for r in body.logs if where.artifact(session, r.removeprefix("sha256:")) is None]
        if missing:
            raise ApiError(
                422,
                f"logs: artifact {missing[0]} does not exist (upload it first)",
                problems=[f"logs: artifact {r} does not exist" for r in missing],
            )
    else:
        spec = _check_spec(session, store, where, body)
    baseline = _baseline(session, where, body.baseline, body.model_name)
    job = Job(
        project=where.project,
        mode=body.mode,
        queue=body.queue,
        model_name=body.model_name,
        spec=spec,
        logs=[r.removeprefix("sha256:") for r in body.logs] if body.logs else None,
        policy_id=policy.id,
        baseline_job_id=baseline,
        submitted_by=actor(key),
        progress={},
        idempotency_key=scoped,
        request_sha256=digest,
    )
    return _create(
        session,
        dispatcher,
        job,
        actor(key),
        where,
        {
            "mode": job.mode,
            "model_name": job.model_name,
            "policy": f"{policy.name}@{policy.version}",
            "baseline_job_id": baseline,
        },
    )


@router.get("", response_model=JobsPublic, summary="List jobs (newest first) with filters and pagination")
def list_jobs(
    session: SessionDep,
    key: Viewer,
    state: State | None = None,
    mode: Mode | None = None,
    model_name: str | None = None,
    verdict: Verdict | None = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    q = scope(key).where(_query(), Job.project)
    if state:
        q = q.where(Job.state == state)
    if mode:
        q = q.where(Job.mode == mode)
    if model_name:
        q = q.where(Job.model_name == model_name)
    if verdict:
        q = q.where(Decision.verdict == verdict)
    count = session.scalar(select(func.count()).select_from(q.subquery()))
    rows = session.execute(q.order_by(Job.created_at.desc(), Job.id).offset(skip).limit(limit)).all()
    return JobsPublic(data=[_public(r) for r in rows], count=count)


@router.get("/{job_id}", response_model=JobPublic, summary="One job: state, progress, timestamps, error")
def get_job(job_id: str, session: SessionDep, key: Viewer):
    return load_public(session, job_id, scope(key))


@router.post(
    "/{job_id}/cancel",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Cancel a job (queued: at once; running: at its next iteration, keeping a partial log)",
)
def cancel_job(job_id: str, session: SessionDep, key: Submitter):
    job = scope(key).job(session, job_id)
    if JobState(job.state).terminal:
        raise ApiError(409, f"job {job_id} already {job.state}")
    job.cancel_requested = True
    audit(session, actor(key), "job.cancel_requested", "job", job_id, state=job.state)
    if job.state == JobState.queued.value:
        job.state, job.error = JobState.cancelled.value, "cancelled before it started"
        job.finished_at = utcnow()
        audit(session, actor(key), "job.cancelled", "job", job_id)
    session.commit()
    return load_public(session, job_id, scope(key))


@router.get("/{job_id}/results", response_model=ResultsPublic, summary="The result files of a job")
def list_results(job_id: str, session: SessionDep, key: Viewer):
    scope(key).job(session, job_id)
    rows = session.execute(
        select(JobFile.name, JobFile.sha256, Artifact.size)
        .join(Artifact, Artifact.sha256 == JobFile.sha256)
        .where(JobFile.job_id == job_id)
        .order_by(JobFile.name)
    ).all()
    return ResultsPublic(
        job_id=job_id,
        files=[
            ResultFilePublic(name=n, sha256=sha, size=size, url=f"/v1/jobs/{job_id}/results/{n}")
            for n, sha, size in rows
        ],
    )


@router.get(
    "/{job_id}/results/{name:path}",
    response_class=FileResponse,
    summary=(
        "Download a result: log, metrics.json, decision.json, report.html, report.md, fmeca.csv, junit.xml"
    ),
)
def get_result(job_id: str, name: str, session: SessionDep, store: StoreDep, key: Viewer):
    scope(key).job(session, job_id)
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
        raise ApiError(404, f"job {job_id} has no result {name!r} (see /v1/jobs/{job_id}/results)")
    suffix = "." + row.name.rsplit(".", 1)[-1] if "." in row.name else ""
    media = MEDIA.get(suffix) or mimetypes.guess_type(row.name)[0] or "application/octet-stream"
    try:
        path = store.verified_path(row.sha256)  # hashed before it is served: a tampered file is refused
    except ArtifactNotFound:  # missing, or corrupt (quarantined)
        raise ApiError(
            404, f"job {job_id}: result {name!r} is not available (missing or failed its hash check)"
        ) from None
    return FileResponse(
        path, media_type=media, headers={"ETag": f'"{row.sha256}"'}, content_disposition_type="inline"
    )


def _decision(session: Session, where: Scope, job_id: str) -> Decision:
    where.job(session, job_id)
    d = session.scalar(select(Decision).where(Decision.job_id == job_id))
    if d is None:
        raise ApiError(404, f"job {job_id} has no decision (yet)")
    return d


def _waiver_public(w: Waiver) -> WaiverPublic:
    return WaiverPublic(
        id=w.id,
        job_id=w.job_id,
        decision_id=w.decision_id,
        justification=w.justification,
        approver=w.approver,
        created_at=as_utc(w.created_at),
        expires_at=as_utc(w.expires_at),
        record_hash=w.record_hash,
    )


@router.get(
    "/{job_id}/decision", response_model=DecisionPublic, summary="The job's gate decision and its waivers"
)
def get_decision(job_id: str, session: SessionDep, key: Viewer):
    d = _decision(session, scope(key), job_id)
    waivers = session.scalars(
        select(Waiver).where(Waiver.decision_id == d.id).order_by(Waiver.created_at)
    ).all()
    return DecisionPublic(
        id=d.id,
        job_id=d.job_id,
        policy_id=d.policy_id,
        model_name=d.model_name,
        verdict=d.verdict,
        headline=d.headline,
        document=d.document,
        created_at=as_utc(d.created_at),
        record_hash=d.record_hash,
        waivers=[_waiver_public(w) for w in waivers],
    )


@router.post(
    "/{job_id}/regate",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Gate a finished job's logs under another policy version, without retraining",
)
def regate_job(
    job_id: str,
    body: RegateCreate,
    session: SessionDep,
    dispatcher: DispatcherDep,
    key: Submitter,
    idempotency_key: IdempotencyKey = None,
):
    where = scope(key)
    scoped, digest, earlier = _idempotent(
        session, key, idempotency_key, {"regate": job_id, **body.model_dump(mode="json")}
    )
    if earlier is not None:
        return load_public(session, earlier.id, where)
    source = where.job(session, job_id, act="re-gate")
    if source.state != JobState.succeeded.value:
        raise ApiError(409, f"job {job_id} is {source.state}; only a succeeded job can be gated again")
    if source.mode == "regate" and source.source_job_id:
        source = where.job(session, source.source_job_id)
    policy = find_policy(session, body.policy, where.project)
    baseline = (
        source.baseline_job_id
        if body.baseline == "same"
        else _baseline(session, where, body.baseline, source.model_name)
    )
    job = Job(
        project=where.project,
        mode="regate",
        queue=queue_for("regate"),
        model_name=source.model_name,
        policy_id=policy.id,
        baseline_job_id=baseline,
        source_job_id=source.id,
        submitted_by=actor(key),
        progress={},
        idempotency_key=scoped,
        request_sha256=digest,
    )
    return _create(
        session,
        dispatcher,
        job,
        actor(key),
        where,
        {
            "mode": "regate",
            "source_job_id": source.id,
            "policy": f"{policy.name}@{policy.version}",
            "baseline_job_id": baseline,
        },
    )


def submitted_by_key(job: Job, key) -> bool:
    """Whether ``key`` submitted ``job`` (its ``submitted_by`` is ``key:<id>(<name>)``)."""
    return (job.submitted_by or "").startswith(f"key:{key.id}(")


@router.post(
    "/{job_id}/waivers",
    response_model=WaiverPublic,
    status_code=status.HTTP_201_CREATED,
    summary="Record a justified waiver of a FAIL (the decision itself is never edited)",
)
def create_waiver(job_id: str, body: WaiverCreate, session: SessionDep, key: Approver):
    where = scope(key)
    job = where.job(session, job_id, act="waive")
    d = _decision(session, where, job_id)
    source = session.get(Job, job.source_job_id) if job.source_job_id else None
    if submitted_by_key(job, key) or (source is not None and submitted_by_key(source, key)):
        raise ApiError(
            403, "separation of duties: an approver cannot waive a job they submitted (or re-gated)"
        )
    if d.verdict != "FAIL":
        raise ApiError(409, f"only a FAIL can be waived; job {job_id}'s verdict is {d.verdict}")
    expires = body.expires_at
    if expires is not None:  # stored in UTC (a time without offset is UTC)
        expires = expires.replace(tzinfo=dt.UTC) if expires.tzinfo is None else expires.astimezone(dt.UTC)
    if expires is not None and expires <= utcnow():
        raise ApiError(422, "expires_at: the waiver would have expired already")
    w = Waiver(
        project=job.project,
        decision_id=d.id,
        job_id=job_id,
        justification=body.justification,
        approver=actor(key),
        expires_at=expires,
    )
    session.add(w)
    session.flush()
    audit(
        session,
        actor(key),
        "waiver.recorded",
        "job",
        job_id,
        waiver_id=w.id,
        decision_id=d.id,
        verdict=d.verdict,
        justification=body.justification,
        expires_at=expires.isoformat() if expires else None,
    )
    webhooks.enqueue(session, job.project, "waiver", job_id, webhooks.waiver_event(job, w))
    session.commit()
    return _waiver_public(w)


@router.get("/{job_id}/waivers", response_model=list[WaiverPublic], summary="Waivers of the job's decision")
def list_waivers(job_id: str, session: SessionDep, key: Viewer):
    scope(key).job(session, job_id)
    return [
        _waiver_public(w)
        for w in session.scalars(select(Waiver).where(Waiver.job_id == job_id).order_by(Waiver.created_at))
    ]

"""Baselines per model name, the audit trail, API keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from sqlalchemy import func, select

from clgate.schemas.api import (
    AuditEventPublic,
    AuditEventsPublic,
    BaselinePublic,
    BaselineSet,
    BaselinesPublic,
    KeyCreate,
    KeyCreated,
    KeyPublic,
    KeysPublic,
    ModelName,
    WhoAmI,
)
from clgate.service.auth import create_key
from clgate.service.deps import Admin, Approver, SessionDep, Viewer, actor, scope
from clgate.service.errors import ApiError
from clgate.service.limits import MAX_SKIP
from clgate.store.db import audit
from clgate.store.models import (
    ApiKey,
    AuditEvent,
    Baseline,
    Job,
    JobFile,
    JobState,
    as_utc,
    utcnow,
)

baselines = APIRouter(prefix="/baselines", tags=["baselines"])
audit_router = APIRouter(prefix="/audit", tags=["audit"])
keys = APIRouter(tags=["keys"])


def _baseline_public(b: Baseline) -> BaselinePublic:
    return BaselinePublic(model_name=b.model_name, job_id=b.job_id, set_by=b.set_by, set_at=as_utc(b.set_at))


@baselines.put(
    "/{model_name}", response_model=BaselinePublic, summary="Mark a succeeded job as the model's baseline"
)
def set_baseline(model_name: ModelName, body: BaselineSet, session: SessionDep, key: Approver):
    where = scope(key)
    job = where.job(session, body.job_id, act="make a baseline of")
    where.model(session, model_name)
    if job.state != JobState.succeeded.value:
        raise ApiError(409, f"job {job.id} is {job.state}; a baseline must be a succeeded job")
    if job.model_name != model_name:
        raise ApiError(409, f"job {job.id} is for model {job.model_name!r}, not {model_name!r}")
    has_log = session.scalar(
        select(func.count()).where(JobFile.job_id == job.id, JobFile.name.like("logs/%"))
    )
    if not has_log and not job.source_job_id:
        raise ApiError(409, f"job {job.id} has no evaluation log to compare with")
    if job.source_job_id:  # a re-gate: its logs are its source's
        job = session.get(Job, job.source_job_id)
    b = session.get(Baseline, model_name)
    previous = b.job_id if b else None
    if b is None:
        b = Baseline(project=where.project, model_name=model_name, job_id=job.id, set_by=actor(key))
        session.add(b)
    else:
        b.job_id, b.set_by, b.set_at = job.id, actor(key), utcnow()
    audit(
        session,
        actor(key),
        "baseline.set",
        "model",
        model_name,
        project=where.project,
        job_id=job.id,
        previous_job_id=previous,
    )
    session.commit()
    return _baseline_public(b)


@baselines.get("", response_model=BaselinesPublic, summary="Baselines of all model names")
def list_baselines(session: SessionDep, key: Viewer):
    rows = session.scalars(
        scope(key).where(select(Baseline), Baseline.project).order_by(Baseline.model_name)
    ).all()
    return BaselinesPublic(data=[_baseline_public(b) for b in rows], count=len(rows))


@baselines.get("/{model_name}", response_model=BaselinePublic, summary="The baseline of one model name")
def get_baseline(model_name: str, session: SessionDep, key: Viewer):
    b = scope(key).get(session, Baseline, model_name, f"baseline for model {model_name!r}")
    return _baseline_public(b)


@audit_router.get("", response_model=AuditEventsPublic, summary="The append-only audit trail (newest first)")
def list_audit(
    session: SessionDep,
    key: Viewer,
    subject_type: str | None = None,
    subject_id: str | None = None,
    action: str | None = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
):
    q = scope(key).where(select(AuditEvent), AuditEvent.project)
    if subject_type:
        q = q.where(AuditEvent.subject_type == subject_type)
    if subject_id:
        q = q.where(AuditEvent.subject_id == subject_id)
    if action:
        q = q.where(AuditEvent.action == action)
    count = session.scalar(select(func.count()).select_from(q.subquery()))
    rows = session.scalars(q.order_by(AuditEvent.id.desc()).offset(skip).limit(limit)).all()
    return AuditEventsPublic(
        count=count,
        data=[
            AuditEventPublic(
                id=e.id,
                at=as_utc(e.at),
                actor=e.actor,
                action=e.action,
                subject_type=e.subject_type,
                subject_id=e.subject_id,
                details=e.details,
                project=e.project,
                seq=e.seq,
                record_hash=e.record_hash,
            )
            for e in rows
        ],
    )


def _key_public(k: ApiKey) -> KeyPublic:
    return KeyPublic(
        id=k.id,
        name=k.name,
        role=k.role,
        project=k.project,
        created_at=as_utc(k.created_at),
        revoked_at=as_utc(k.revoked_at),
    )


@keys.get("/whoami", response_model=WhoAmI, summary="The key making the request")
def whoami(key: Viewer):
    return WhoAmI(id=key.id, name=key.name, role=key.role, project=key.project)


@keys.post(
    "/keys", response_model=KeyCreated, status_code=status.HTTP_201_CREATED, summary="Create an API key"
)
def new_key(body: KeyCreate, session: SessionDep, key: Admin):
    record, secret = create_key(
        session, name=body.name, role=body.role, project=body.project, actor=actor(key)
    )
    session.commit()
    return KeyCreated(id=record.id, name=record.name, role=record.role, project=record.project, key=secret)


@keys.get("/keys", response_model=KeysPublic, summary="List API keys (never their secrets)")
def list_keys(session: SessionDep, _: Admin):
    rows = session.scalars(select(ApiKey).order_by(ApiKey.created_at)).all()
    return KeysPublic(data=[_key_public(k) for k in rows], count=len(rows))


@keys.delete("/keys/{key_id}", response_model=KeyPublic, summary="Revoke an API key")
def revoke_key(key_id: str, session: SessionDep, key: Admin):
    k = session.get(ApiKey, key_id)
    if k is None:
        raise ApiError(404, f"no key {key_id}")
    if k.revoked_at is None:
        k.revoked_at = utcnow()
        audit(session, actor(key), "key.revoked", "api_key", key_id, project=k.project)
        session.commit()
    return _key_public(k)

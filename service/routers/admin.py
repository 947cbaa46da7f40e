"""Baselines per model name, the audit trail, API keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from clgate.schemas.api import (
    AuditEventPublic,
    AuditEventsPublic,
    BaselinePublic,
    BaselineSet,
    BaselinesPublic,
    HistoryHeadsPublic,
    KeyCreate,
    KeyCreated,
    KeyPublic,
    KeysPublic,
    ModelName,
    WhoAmI,
)
from clgate.service.deps import Admin, Approver, GlobalAdmin, SessionDep, Viewer, actor, scope
from clgate.service.limits import MAX_SKIP
from clgate.store import audit, history
from clgate.store import baselines as baseline_records
from clgate.store import keys as key_records

baselines = APIRouter(prefix="/baselines", tags=["baselines"])
audit_router = APIRouter(prefix="/audit", tags=["audit"])
keys = APIRouter(tags=["keys"])


@baselines.put(
    "/{model_name}", response_model=BaselinePublic, summary="Mark a succeeded job as the model's baseline"
)
def set_baseline(model_name: ModelName, body: BaselineSet, session: SessionDep, key: Approver):
    b = baseline_records.set_baseline(session, scope(key), model_name, body.job_id, actor=actor(key))
    session.commit()
    return BaselinePublic.model_validate(b)


@baselines.get("", response_model=BaselinesPublic, summary="Baselines of all model names")
def list_baselines(session: SessionDep, key: Viewer):
    rows = baseline_records.all_baselines(session, scope(key))
    return BaselinesPublic(data=[BaselinePublic.model_validate(b) for b in rows], count=len(rows))


@baselines.get("/{model_name}", response_model=BaselinePublic, summary="The baseline of one model name")
def get_baseline(model_name: str, session: SessionDep, key: Viewer):
    return BaselinePublic.model_validate(baseline_records.get(session, scope(key), model_name))


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
    where = scope(key)
    rows, count = audit.page(
        session,
        where,
        subject_type=subject_type,
        subject_id=subject_id,
        action=action,
        skip=skip,
        limit=limit,
    )
    events = [AuditEventPublic.model_validate(e) for e in rows]
    if not where.everywhere:  # id and seq number the whole deployment's events: gaps count other projects'
        events = [e.model_copy(update={"id": None, "seq": None}) for e in events]
    return AuditEventsPublic(count=count, data=events)


@audit_router.get(
    "/heads",
    response_model=HistoryHeadsPublic,
    summary="Signed heads of the record history, for verifiers (global_admin keys only)",
)
def history_heads(session: SessionDep, key: GlobalAdmin):
    """Each family's length and head hash, signed now: keep it elsewhere and give it to
    `clgate audit verify --head FILE|URL` later, which fails if the history was truncated or rolled back.

    The heads count every project's records, so only a ``global_admin`` key gets them (403 otherwise)."""
    return HistoryHeadsPublic.model_validate(history.heads_now(session))


@keys.get("/whoami", response_model=WhoAmI, summary="The key making the request")
def whoami(key: Viewer):
    return WhoAmI.model_validate(key)


@keys.post(
    "/keys", response_model=KeyCreated, status_code=status.HTTP_201_CREATED, summary="Create an API key"
)
def new_key(body: KeyCreate, session: SessionDep, key: Admin):
    scope(key).may_manage(project=body.project, role=body.role)
    record, secret = key_records.create_key(
        session, name=body.name, role=body.role, project=body.project, actor=actor(key)
    )
    session.commit()
    return KeyCreated.model_validate(key_records.NewKey(record, secret))


@keys.get("/keys", response_model=KeysPublic, summary="List API keys (never their secrets)")
def list_keys(session: SessionDep, key: Admin):
    rows = key_records.all_keys(session, scope(key).key_project)
    return KeysPublic(data=[KeyPublic.model_validate(k) for k in rows], count=len(rows))


@keys.delete("/keys/{key_id}", response_model=KeyPublic, summary="Revoke an API key")
def revoke_key(key_id: str, session: SessionDep, key: Admin):
    record = key_records.revoke(session, key_id, actor=actor(key), project=scope(key).key_project)
    session.commit()
    return KeyPublic.model_validate(record)

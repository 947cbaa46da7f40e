"""Policies: immutable versions (create, get, list)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, status
from fastapi.responses import JSONResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clgate.policy import PolicyError, parse_policy
from clgate.schemas.api import PoliciesPublic, PolicyRef, PolicyVersionPublic
from clgate.service.deps import Approver, SessionDep, Viewer, actor, scope
from clgate.service.errors import ApiError
from clgate.service.limits import MAX_SKIP
from clgate.store.db import audit
from clgate.store.models import Policy

router = APIRouter(prefix="/policies", tags=["policies"])


def to_public(p: Policy) -> PolicyVersionPublic:
    return PolicyVersionPublic(
        id=p.id,
        name=p.name,
        version=p.version,
        sha256=p.sha256,
        created_at=p.created_at,
        created_by=p.created_by,
        document=p.document,
    )


def find(session: Session, ref: PolicyRef, project: str) -> Policy:
    """The policy version ``ref`` of ``project`` (a job is gated by its own project's policies)."""
    p = session.scalar(
        select(Policy).where(
            Policy.project == project, Policy.name == ref.name, Policy.version == ref.version
        )
    )
    if p is None:
        raise ApiError(
            422,
            f"policy {ref.name} version {ref.version} does not exist in project {project!r} "
            "(create it with POST /v1/policies)",
        )
    return p


@router.post(
    "",
    response_model=PolicyVersionPublic,
    status_code=status.HTTP_201_CREATED,
    summary="Create a policy version (clgate.policy/v1 document); versions are immutable",
    responses={
        200: {"description": "The identical version already exists"},
        409: {"description": "That name and version exist with other content"},
    },
)
def create_policy(document: Annotated[dict[str, Any], Body()], session: SessionDep, key: Approver):
    try:
        policy = parse_policy(document)
    except PolicyError as exc:
        raise ApiError(422, "invalid policy: " + exc.problems[0], problems=exc.problems) from None
    canonical = policy.model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    project = scope(key).project
    existing = session.scalar(
        select(Policy).where(
            Policy.project == project, Policy.name == policy.name, Policy.version == str(policy.version)
        )
    )
    if existing is not None:
        if existing.sha256 == digest:
            return JSONResponse(to_public(existing).model_dump(mode="json"), status_code=200)
        raise ApiError(
            409,
            f"policy {policy.name} version {policy.version} already exists with other content; "
            "versions are immutable: publish a new version",
        )
    p = Policy(
        project=project,
        name=policy.name,
        version=str(policy.version),
        document=canonical,
        sha256=digest,
        created_by=actor(key),
    )
    session.add(p)
    session.flush()
    audit(
        session,
        actor(key),
        "policy.created",
        "policy",
        p.id,
        project=project,
        name=p.name,
        version=p.version,
        sha256=digest,
    )
    session.commit()
    return to_public(p)


@router.get("", response_model=PoliciesPublic, summary="List policy versions")
def list_policies(
    session: SessionDep,
    key: Viewer,
    name: str | None = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    q = scope(key).where(select(Policy), Policy.project)
    if name:
        q = q.where(Policy.name == name)
    count = session.scalar(select(func.count()).select_from(q.subquery()))
    rows = session.scalars(q.order_by(Policy.name, Policy.created_at).offset(skip).limit(limit)).all()
    return PoliciesPublic(data=[to_public(p) for p in rows], count=count)


@router.get("/{name}/{version}", response_model=PolicyVersionPublic, summary="One policy version")
def get_policy(name: str, version: str, session: SessionDep, key: Viewer):
    p = session.scalar(
        scope(key)
        .where(select(Policy), Policy.project)
        .where(Policy.name == name, Policy.version == version)
        .order_by(Policy.project)
        .limit(1)
    )
    if p is None:
        raise ApiError(404, f"policy {name} version {version} does not exist")
    return to_public(p)

"""Policies: immutable versions (create, get, list)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, status
from fastapi.responses import JSONResponse

from clgate.schemas.api import PoliciesPublic, PolicyVersionPublic
from clgate.service.deps import Approver, SessionDep, Viewer, actor, scope
from clgate.service.limits import MAX_SKIP
from clgate.store import policies

router = APIRouter(prefix="/policies", tags=["policies"])


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
    policy, created = policies.publish(session, document, where=scope(key), actor=actor(key))
    body = PolicyVersionPublic.model_validate(policy)
    if not created:
        return JSONResponse(body.model_dump(mode="json"), status_code=200)
    session.commit()
    return body


@router.get("", response_model=PoliciesPublic, summary="List policy versions")
def list_policies(
    session: SessionDep,
    key: Viewer,
    name: str | None = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    rows, count = policies.page(session, scope(key), name=name, skip=skip, limit=limit)
    return PoliciesPublic(data=[PolicyVersionPublic.model_validate(p) for p in rows], count=count)


@router.get("/{name}/{version}", response_model=PolicyVersionPublic, summary="One policy version")
def get_policy(name: str, version: str, session: SessionDep, key: Viewer):
    return PolicyVersionPublic.model_validate(policies.get(session, scope(key), name, version))

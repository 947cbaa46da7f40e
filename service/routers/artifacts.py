"""Artifacts: streamed upload (SHA-256 content addressing, size limit), metadata, download by hash."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse
from sqlalchemy import func, select

from clgate.schemas.api import ArtifactKind, ArtifactPublic, ArtifactsPublic
from clgate.service.deps import SessionDep, SettingsDep, StoreDep, Submitter, Viewer, actor, scope
from clgate.service.errors import ApiError
from clgate.service.limits import MAX_SKIP
from clgate.store.artifacts import ArtifactTooLarge, DigestMismatch, parse_ref
from clgate.store.db import audit, session_scope
from clgate.store.models import Artifact, ProjectArtifact

router = APIRouter(prefix="/artifacts", tags=["artifacts"])


def to_public(a: Artifact) -> ArtifactPublic:
    return ArtifactPublic(
        sha256=a.sha256,
        ref=f"sha256:{a.sha256}",
        size=a.size,
        kind=a.kind,
        filename=a.filename,
        created_at=a.created_at,
        created_by=a.created_by,
    )


def _digest(ref: str) -> str:
    try:
        return parse_ref(ref)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None


@router.post(
    "",
    response_model=ArtifactPublic,
    status_code=status.HTTP_201_CREATED,
    summary="Upload an artifact (raw request body, streamed)",
    responses={
        200: {"description": "Same content already stored"},
        413: {"description": "Over the size limit"},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_artifact(
    request: Request,
    key: Submitter,
    settings: SettingsDep,
    store: StoreDep,
    kind: Annotated[ArtifactKind, Query(description="model, data, log, spec, other")] = "other",
    filename: Annotated[str | None, Query(max_length=255, pattern=r"^[^/\\]+$")] = None,
    sha256: Annotated[str | None, Query(description="Expected sha256 (checked after upload)")] = None,
    content_length: Annotated[int | None, Header(include_in_schema=False)] = None,  # set by the HTTP client
):
    limit = settings.max_upload_bytes
    if content_length is not None and content_length > limit:
        raise ApiError(413, f"artifact of {content_length} bytes exceeds the upload limit of {limit} bytes")
    if sha256 is not None:
        _digest(sha256)
    try:
        stored = await store.put_stream(request.stream(), max_bytes=limit, expected_sha256=sha256)
    except ArtifactTooLarge as exc:
        raise ApiError(413, str(exc)) from None
    except DigestMismatch as exc:
        raise ApiError(422, str(exc)) from None
    if stored.size == 0:
        raise ApiError(422, "empty upload: send the file as the request body")

    project = scope(key).project

    def record() -> tuple[Artifact, bool]:
        with session_scope(request.app.state.sessions) as s:
            existing = s.get(Artifact, stored.sha256)
            granted = existing is not None and s.get(ProjectArtifact, (project, stored.sha256)) is not None
            if existing is None:
                existing = Artifact(
                    sha256=stored.sha256,
                    size=stored.size,
                    kind=kind,
                    filename=filename,
                    created_by=actor(key),
                )
                s.add(existing)
                s.flush()
            if not granted:  # the project has the content now (uploading it proves it)
                s.add(ProjectArtifact(project=project, sha256=stored.sha256))
                audit(
                    s,
                    actor(key),
                    "artifact.uploaded",
                    "artifact",
                    stored.sha256,
                    project=project,
                    size=stored.size,
                    kind=kind,
                    filename=filename,
                )
            return existing, not granted

    artifact, created = await run_in_threadpool(record)
    body = to_public(artifact)
    if created:
        return body
    return JSONResponse(body.model_dump(mode="json"), status_code=200)


@router.get("", response_model=ArtifactsPublic, summary="List artifacts (newest first)")
def list_artifacts(
    session: SessionDep,
    key: Viewer,
    kind: ArtifactKind | None = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    q = select(Artifact).where(scope(key).artifact_visible())
    if kind:
        q = q.where(Artifact.kind == kind)
    count = session.scalar(select(func.count()).select_from(q.subquery()))
    rows = session.scalars(q.order_by(Artifact.created_at.desc()).offset(skip).limit(limit)).all()
    return ArtifactsPublic(data=[to_public(a) for a in rows], count=count)


@router.get("/{ref}", response_model=ArtifactPublic, summary="Artifact metadata")
def get_artifact(ref: str, session: SessionDep, key: Viewer):
    a = scope(key).artifact(session, _digest(ref))
    if a is None:
        raise ApiError(404, f"no artifact sha256:{_digest(ref)}")
    return to_public(a)


@router.get("/{ref}/content", summary="Download an artifact by hash", response_class=FileResponse)
def download_artifact(ref: str, session: SessionDep, store: StoreDep, key: Viewer):
    digest = _digest(ref)
    a = scope(key).artifact(session, digest)
    if a is None or not store.exists(digest):
        raise ApiError(404, f"no artifact sha256:{digest}")
    return FileResponse(
        store.path(digest),
        media_type="application/octet-stream",
        filename=a.filename or digest,
        headers={"ETag": f'"{digest}"'},
    )

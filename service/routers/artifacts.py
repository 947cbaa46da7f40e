"""Artifacts: streamed upload (SHA-256 content addressing, size limit), metadata, download by hash."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse

from clgate.schemas.api import ArtifactKind, ArtifactPublic, ArtifactsPublic
from clgate.service.deps import SessionDep, SettingsDep, StoreDep, Submitter, Viewer, actor, scope
from clgate.service.errors import ApiError
from clgate.service.limits import MAX_SKIP
from clgate.store import uploads
from clgate.store.artifacts import ArtifactTooLarge, DigestMismatch, parse_ref

router = APIRouter(prefix="/artifacts", tags=["artifacts"])


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

    _, created = await run_in_threadpool(
        uploads.record_upload,
        request.app.state.sessions,
        stored,
        project=scope(key).project,
        kind=kind,
        filename=filename,
        actor=actor(key),
    )
    body = await run_in_threadpool(_project_view, request, key, stored.sha256)
    if created:
        return body
    return JSONResponse(body.model_dump(mode="json"), status_code=200)


def _project_view(request: Request, key, digest: str) -> ArtifactPublic:
    """The artifact as the key's project sees it (its own upload's name, never another project's)."""
    with request.app.state.sessions() as session:
        return ArtifactPublic.model_validate(uploads.get(session, scope(key), digest))


@router.get("", response_model=ArtifactsPublic, summary="List artifacts (newest first)")
def list_artifacts(
    session: SessionDep,
    key: Viewer,
    kind: ArtifactKind | None = None,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    rows, count = uploads.page(session, scope(key), kind=kind, skip=skip, limit=limit)
    return ArtifactsPublic(data=[ArtifactPublic.model_validate(a) for a in rows], count=count)


@router.get("/{ref}", response_model=ArtifactPublic, summary="Artifact metadata")
def get_artifact(ref: str, session: SessionDep, key: Viewer):
    return ArtifactPublic.model_validate(uploads.get(session, scope(key), _digest(ref)))


@router.get("/{ref}/content", summary="Download an artifact by hash", response_class=FileResponse)
def download_artifact(ref: str, session: SessionDep, store: StoreDep, key: Viewer):
    digest = _digest(ref)
    a = uploads.get(session, scope(key), digest)
    if not store.exists(digest):
        raise ApiError(404, f"no artifact sha256:{digest}")
    return FileResponse(
        store.path(digest),
        media_type="application/octet-stream",
        filename=a.filename or digest,
        headers={"ETag": f'"{digest}"'},
    )

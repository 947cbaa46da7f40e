"""Artifact records: an upload granted to a project, and the artifacts a scope sees.

The content lives in the content-addressed :mod:`clgate.store.artifacts`; here are its records (one
:class:`~clgate.store.models.Artifact` per content, one :class:`~clgate.store.models.ProjectArtifact`
per project that uploaded it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from clgate.store.artifacts import Stored
from clgate.store.db import audit, session_scope
from clgate.store.errors import NotFound
from clgate.store.models import Artifact, AuditEvent, ProjectArtifact
from clgate.store.scope import Scope, total


@dataclass(frozen=True)
class ArtifactView:
    """An artifact as one project sees it: the shared content (hash, size) with that project's own upload
    (kind, file name, uploader, time), never another project's. A result file of the project's jobs
    that it never uploaded shows no file name and no uploader."""

    sha256: str
    size: int
    kind: str
    filename: str | None
    created_at: dt.datetime
    created_by: str | None

    @property
    def ref(self) -> str:
        return f"sha256:{self.sha256}"


def _views(session: Session, where: Scope, rows: Sequence[Artifact]) -> list[ArtifactView]:
    """``rows`` as ``where`` sees them: a ``global_admin`` the first upload; any other key its project's own
    first upload, read from the ``artifact.uploaded`` events of its project."""
    if where.everywhere or not rows:
        return [ArtifactView(a.sha256, a.size, a.kind, a.filename, a.created_at, a.created_by) for a in rows]
    events = session.scalars(
        select(AuditEvent)
        .where(
            AuditEvent.action == "artifact.uploaded",
            AuditEvent.project == where.project,
            AuditEvent.subject_id.in_([a.sha256 for a in rows]),
        )
        .order_by(AuditEvent.id.desc())
    ).all()
    first = {e.subject_id: e for e in events}  # the earliest wins (newest first, overwritten)
    out = []
    for a in rows:
        e = first.get(a.sha256)
        if e is None:
            out.append(ArtifactView(a.sha256, a.size, a.kind, None, a.created_at, None))
        else:
            d = e.details or {}
            kind, filename = d.get("kind") or a.kind, d.get("filename")
            out.append(ArtifactView(a.sha256, a.size, kind, filename, e.at, e.actor))
    return out


def view(session: Session, where: Scope, artifact: Artifact) -> ArtifactView:
    """``artifact`` as ``where`` sees it (see :class:`ArtifactView`)."""
    return _views(session, where, [artifact])[0]


def record_upload(
    sessions: sessionmaker[Session],
    stored: Stored,
    *,
    project: str,
    kind: str,
    filename: str | None,
    actor: str,
) -> tuple[Artifact, bool]:
    """Record stored content as uploaded by ``project``: ``(artifact, granted now)``.

    The content is recorded once (its first upload's kind and filename); each project that uploads it is
    granted it once, with an ``artifact.uploaded`` event (uploading it proves the project has it) that
    holds that project's own kind and filename (what :func:`view` shows it).
    """
    with session_scope(sessions) as s:
        existing = s.get(Artifact, stored.sha256)
        granted = existing is not None and s.get(ProjectArtifact, (project, stored.sha256)) is not None
        if existing is None:
            existing = Artifact(
                sha256=stored.sha256, size=stored.size, kind=kind, filename=filename, created_by=actor
            )
            s.add(existing)
            s.flush()
        if not granted:
            s.add(ProjectArtifact(project=project, sha256=stored.sha256))
            audit(
                s,
                actor,
                "artifact.uploaded",
                "artifact",
                stored.sha256,
                project=project,
                size=stored.size,
                kind=kind,
                filename=filename,
            )
        return existing, not granted


def page(
    session: Session, where: Scope, *, kind: str | None, skip: int, limit: int
) -> tuple[list[ArtifactView], int]:
    """One page of the artifacts ``where`` sees (newest first) and the total."""
    q = select(Artifact).where(where.artifact_visible())
    if kind:
        q = q.where(Artifact.kind == kind)
    count = total(session, q)
    rows = session.scalars(q.order_by(Artifact.created_at.desc()).offset(skip).limit(limit)).all()
    return _views(session, where, rows), count


def get(session: Session, where: Scope, digest: str) -> ArtifactView:
    """The artifact ``digest`` as ``where`` sees it, if it does; :class:`NotFound` otherwise."""
    a = where.artifact(session, digest)
    if a is None:
        raise NotFound(f"no artifact sha256:{digest}")
    return view(session, where, a)

"""Artifact records: an upload granted to a project, and the artifacts a scope sees.

The content lives in the content-addressed :mod:`clgate.store.artifacts`; here are its records (one
:class:`~clgate.store.models.Artifact` per content, one :class:`~clgate.store.models.ProjectArtifact`
per project that uploaded it).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from clgate.store.artifacts import Stored
from clgate.store.db import audit, session_scope
from clgate.store.errors import NotFound
from clgate.store.models import Artifact, ProjectArtifact
from clgate.store.scope import Scope


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
    granted it once, with an ``artifact.uploaded`` event (uploading it proves the project has it).
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
) -> tuple[Sequence[Artifact], int]:
    """One page of the artifacts ``where`` sees (newest first) and the total."""
    q = select(Artifact).where(where.artifact_visible())
    if kind:
        q = q.where(Artifact.kind == kind)
    count = session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = session.scalars(q.order_by(Artifact.created_at.desc()).offset(skip).limit(limit)).all()
    return rows, count


def get(session: Session, where: Scope, digest: str) -> Artifact:
    """The artifact ``digest`` if ``where`` sees it; :class:`NotFound` otherwise."""
    a = where.artifact(session, digest)
    if a is None:
        raise NotFound(f"no artifact sha256:{digest}")
    return a

"""The project scope: which project's records a key may see and touch, decided in one place.

A key sees and acts on its own project's records only, a project's admin included; only a key with the
explicit ``global_admin`` role sees and acts across projects. Every
store query that an API key makes takes a :class:`Scope`: a record of another project is answered
exactly like a missing one (:class:`~clgate.store.errors.NotFound`), so keys cannot probe other
projects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, exists, func, select, true
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from clgate.schemas.vocab import Role
from clgate.store.errors import Forbidden, NotFound
from clgate.store.keys import has_role
from clgate.store.models import ApiKey, Artifact, Job, JobFile, Model, ProjectArtifact

T = TypeVar("T")


@dataclass(frozen=True)
class Scope:
    """What a key may see: its own project's records, or every project's for a ``global_admin`` key."""

    key: ApiKey

    @property
    def project(self) -> str:
        """The project new records of this key belong to."""
        return self.key.project

    @property
    def everywhere(self) -> bool:
        return has_role(self.key, Role.global_admin)

    def visible(self, column: Any) -> ColumnElement[bool]:
        """A condition on a ``project`` column: true for the records this key may see."""
        return true() if self.everywhere else column == self.key.project

    def where(self, query: Select, column: Any) -> Select:
        return query.where(self.visible(column))

    def get(self, session: Session, cls: type[T], ident: Any, what: str) -> T:
        """The record ``ident`` of ``cls`` if this key may see it; :class:`NotFound` naming ``what``
        otherwise."""
        record = session.get(cls, ident)
        if record is None or not (self.everywhere or record.project == self.key.project):  # type: ignore[attr-defined]
            raise NotFound(f"no {what}")
        return record

    def job(self, session: Session, job_id: str, *, act: str | None = None) -> Job:
        """The job ``job_id`` if this key may see it (:class:`NotFound` otherwise); with ``act`` (what the key
        is about to do to it) it must also be of the key's own project unless the key is a ``global_admin``
        (:class:`Forbidden`)."""
        job = self.get(session, Job, job_id, f"job {job_id}")
        if act is not None and job.project != self.key.project and not self.everywhere:
            raise Forbidden(
                f"job {job_id} belongs to project {job.project!r}; {act} it with a key of that project"
            )
        return job

    def artifact_visible(self) -> ColumnElement[bool]:
        """A condition on :class:`Artifact` rows: uploaded by this key's project or a result file of one of
        its jobs (any, for a ``global_admin``)."""
        if self.everywhere:
            return true()
        uploaded = exists().where(
            ProjectArtifact.sha256 == Artifact.sha256, ProjectArtifact.project == self.key.project
        )
        produced = exists().where(
            JobFile.sha256 == Artifact.sha256, JobFile.job_id == Job.id, Job.project == self.key.project
        )
        return uploaded | produced

    def artifact(self, session: Session, digest: str) -> Artifact | None:
        """The artifact ``digest`` if this key's project uploaded or produced it (any, for a
        ``global_admin``)."""
        return session.scalar(select(Artifact).where(Artifact.sha256 == digest, self.artifact_visible()))

    def model(self, session: Session, name: str, *, claim: bool = False) -> Model | None:
        """The model ``name``: :class:`Forbidden` when another project owns it; with ``claim`` an unknown
        name becomes this key's project's (the first job under a name claims it)."""
        model = session.get(Model, name)
        if model is None:
            if not claim:
                return None
            try:
                with session.begin_nested():  # two first jobs under one name: one claims it
                    session.add(Model(name=name, project=self.key.project))
            except IntegrityError:
                pass
            model = session.get(Model, name)
            assert model is not None
        if model.project != self.key.project:
            raise Forbidden(
                f"model {name!r} belongs to another project (this key's project is {self.key.project!r})"
            )
        return model

    @property
    def key_project(self) -> str | None:
        """The project whose keys this key manages: its own, or ``None`` (every project) for a
        ``global_admin``."""
        return None if self.everywhere else self.key.project

    def may_manage(self, *, project: str, role: str) -> None:
        """:class:`Forbidden` unless this key may create a ``role`` key in ``project``: a project's admin
        creates keys up to ``admin`` in its own project; other projects and ``global_admin`` keys need a
        ``global_admin``."""
        if self.everywhere:
            return
        if project != self.key.project:
            raise Forbidden(
                f"project: this key manages project {self.key.project!r} only; keys of project {project!r} "
                "need a global_admin key"
            )
        if role == Role.global_admin.name:
            raise Forbidden("role: only a global_admin key may create a global_admin key")


def filtered(query: Select[Any], *equal: tuple[Any, Any]) -> Select[Any]:
    """``query`` narrowed to ``column == value`` for every ``(column, value)`` whose value is given."""
    for column, value in equal:
        if value:
            query = query.where(column == value)
    return query


def total(session: Session, query: Select[Any]) -> int:
    """How many rows ``query`` selects (before paging)."""
    return session.scalar(select(func.count()).select_from(query.subquery())) or 0

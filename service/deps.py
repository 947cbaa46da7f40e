"""Dependencies of the routes, as ``Annotated`` aliases: settings, session, store, dispatcher, keys with
roles,
and :class:`Scope`, the one place that decides which project's records a key may see and touch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import ColumnElement, Select, exists, select, true
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from clgate.service.auth import has_role, verify
from clgate.service.dispatch import Dispatcher
from clgate.service.errors import ApiError
from clgate.store.artifacts import ArtifactStore
from clgate.store.models import ApiKey, Artifact, Job, JobFile, Model, ProjectArtifact, Role
from clgate.store.settings import Settings

T = TypeVar("T")


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_db(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


def get_store(request: Request) -> ArtifactStore:
    return request.app.state.store


def get_dispatcher(request: Request) -> Dispatcher:
    return request.app.state.dispatcher


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_db)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]

_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="clgate API key")
_bearer = HTTPBearer(auto_error=False, description="clgate API key as a bearer token")


def current_key(
    session: SessionDep,
    header: Annotated[str | None, Security(_header)] = None,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
) -> ApiKey:
    key = header or (bearer.credentials if bearer else None)
    if not key:
        raise ApiError(
            401,
            "an API key is required (X-API-Key header or Authorization: Bearer)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    record = verify(session, key)
    if record is None:
        raise ApiError(401, "invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    return record


def require(role: Role):
    def dependency(key: Annotated[ApiKey, Depends(current_key)]) -> ApiKey:
        if not has_role(key, role):
            raise ApiError(403, f"this action needs the {role.name} role (the key {key.id} has {key.role})")
        return key

    dependency.__name__ = f"require_{role.name}"
    return dependency


Viewer = Annotated[ApiKey, Depends(require(Role.viewer))]
Submitter = Annotated[ApiKey, Depends(require(Role.submitter))]
Approver = Annotated[ApiKey, Depends(require(Role.approver))]
Admin = Annotated[ApiKey, Depends(require(Role.admin))]


def scope(key: ApiKey) -> Scope:
    """The scope of an authenticated key (each route has one through its role dependency)."""
    return Scope(key)


def actor(key: ApiKey) -> str:
    """How a key appears in the audit trail: ``key:<id>(<name>)``."""
    return f"key:{key.id}({key.name})"


@dataclass(frozen=True)
class Scope:
    """What a key may see: its own project's records, or every project's for an admin key.

    Every route reads records through these methods (``scope.get``, ``scope.where`` …): a record of
    another project is answered exactly like a missing one (404), so keys cannot probe other projects.
    """

    key: ApiKey

    @property
    def project(self) -> str:
        """The project new records of this key belong to."""
        return self.key.project

    @property
    def everywhere(self) -> bool:
        return has_role(self.key, Role.admin)

    def visible(self, column: Any) -> ColumnElement[bool]:
        """A condition on a ``project`` column: true for the records this key may see."""
        return true() if self.everywhere else column == self.key.project

    def where(self, query: Select, column: Any) -> Select:
        return query.where(self.visible(column))

    def get(self, session: Session, cls: type[T], ident: Any, what: str) -> T:
        """The record ``ident`` of ``cls`` if this key may see it; 404 naming ``what`` otherwise."""
        record = session.get(cls, ident)
        if record is None or not (self.everywhere or record.project == self.key.project):
            raise ApiError(404, f"no {what}")
        return record

    def job(self, session: Session, job_id: str, *, act: str | None = None) -> Job:
        """The job ``job_id`` if this key may see it (404 otherwise); with ``act`` (what the key is about to
        do to it) it must also be of the key's own project: an admin reads across projects but acts
        within its own (403)."""
        job = self.get(session, Job, job_id, f"job {job_id}")
        if act is not None and job.project != self.key.project:
            raise ApiError(
                403, f"job {job_id} belongs to project {job.project!r}; {act} it with a key of that project"
            )
        return job

    def artifact_visible(self) -> ColumnElement[bool]:
        """A condition on :class:`Artifact` rows: uploaded by this key's project or a result file of one of
        its jobs (any, for an admin)."""
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
        """The artifact ``digest`` if this key's project uploaded or produced it (any, for an admin)."""
        return session.scalar(select(Artifact).where(Artifact.sha256 == digest, self.artifact_visible()))

    def model(self, session: Session, name: str, *, claim: bool = False) -> Model | None:
        """The model ``name``: 403 when another project owns it; with ``claim`` an unknown name becomes
        this key's project's (the first job under a name claims it)."""
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
        if model.project != self.key.project:
            raise ApiError(
                403, f"model {name!r} belongs to another project (this key's project is {self.key.project!r})"
            )
        return model

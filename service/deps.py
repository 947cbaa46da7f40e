"""Dependencies of the routes, as ``Annotated`` aliases: settings, session, artifact store, dispatcher, and
keys with roles.

Which project's records a key may see is decided in one place, :class:`clgate.store.scope.Scope`; the
routes hand it to the store's queries (:func:`scope`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from clgate.schemas.vocab import Role
from clgate.service.dispatch import Dispatcher
from clgate.service.errors import ApiError
from clgate.store.artifacts import ArtifactStore
from clgate.store.keys import actor, has_role, verify
from clgate.store.models import ApiKey
from clgate.store.scope import Scope
from clgate.store.settings import Settings

__all__ = [
    "Admin",
    "Approver",
    "DispatcherDep",
    "GlobalAdmin",
    "SessionDep",
    "SettingsDep",
    "StoreDep",
    "Submitter",
    "Viewer",
    "actor",
    "scope",
]


# Dependencies that do no blocking I/O are ``async def``: FastAPI runs a plain ``def`` dependency in the
# thread pool, one hop (and a wait for a thread under load) per dependency per request.


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_db(request: Request) -> AsyncIterator[Session]:
    """A session per request. Making it does no I/O (its first query takes a connection, in the route's
    thread); closing it returns the connection, so that runs in the thread pool."""
    session = request.app.state.sessions()
    try:
        yield session
    finally:
        await run_in_threadpool(session.close)


async def get_store(request: Request) -> ArtifactStore:
    return request.app.state.store


async def get_dispatcher(request: Request) -> Dispatcher:
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


def require(role: Role, *, why: str = "") -> Callable[[ApiKey], Awaitable[ApiKey]]:
    """A dependency refusing (403) a key below ``role``; ``why`` ends the reason."""
    reason = f": {why}" if why else ""

    async def dependency(key: Annotated[ApiKey, Depends(current_key)]) -> ApiKey:
        if not has_role(key, role):
            raise ApiError(
                403, f"this action needs the {role.name} role (the key {key.id} has {key.role}){reason}"
            )
        return key

    dependency.__name__ = f"require_{role.name}"
    return dependency


Viewer = Annotated[ApiKey, Depends(require(Role.viewer))]
Submitter = Annotated[ApiKey, Depends(require(Role.submitter))]
Approver = Annotated[ApiKey, Depends(require(Role.approver))]
Admin = Annotated[ApiKey, Depends(require(Role.admin))]
#: What describes the whole deployment and cannot be narrowed to one project (the signed history's heads)
GlobalAdmin = Annotated[
    ApiKey,
    Depends(
        require(
            Role.global_admin,
            why="it answers for every project's records (one history for the deployment), and a key of "
            "one project may see its own only",
        )
    ),
]


def scope(key: ApiKey) -> Scope:
    """The scope of an authenticated key (each route has one through its role dependency)."""
    return Scope(key)

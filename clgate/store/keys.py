"""API keys: ``clg_<id>_<secret>``; only the SHA-256 of the secret is stored.

Keys are random (256 bits), so a plain SHA-256 is a safe verifier (no password stretching needed);
the comparison is constant-time. Roles are :data:`clgate.schemas.vocab.ROLES`, ordered.

>>> key, key_id, digest = new_key()
>>> key.startswith("clg_" + key_id + "_"), len(digest)
(True, 64)
>>> split_key(key)[0] == key_id
True
>>> split_key("nonsense") is None
True
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from clgate.schemas.vocab import ROLES, Role
from clgate.store.db import audit, session_scope
from clgate.store.errors import NotFound
from clgate.store.models import DEFAULT_PROJECT, PROJECT_PATTERN, ApiKey, utcnow

KEY_RE = re.compile(r"^clg_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key() -> tuple[str, str, str]:
    """(full key, key id, sha256 of the secret)."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return f"clg_{key_id}_{secret}", key_id, _digest(secret)


def split_key(key: str) -> tuple[str, str] | None:
    match = KEY_RE.match(key.strip())
    return (match[1], match[2]) if match else None


def actor(key: ApiKey) -> str:
    """How a key appears in the audit trail: ``key:<id>(<name>)``."""
    return f"key:{key.id}({key.name})"


def has_role(record: ApiKey, needed: Role) -> bool:
    return Role[record.role] >= needed


def verify(session: Session, key: str) -> ApiKey | None:
    """The active key record for ``key``, or None."""
    parts = split_key(key)
    if parts is None:
        return None
    record = session.get(ApiKey, parts[0])
    if record is None or record.revoked_at is not None:
        return None
    if not hmac.compare_digest(record.secret_sha256, _digest(parts[1])):
        return None
    return record


def create_key(
    session: Session,
    *,
    name: str,
    role: str,
    actor: str,
    key: str | None = None,
    project: str = DEFAULT_PROJECT,
) -> tuple[ApiKey, str]:
    """Store a new key (or the given well-formed ``key``) with ``role`` in ``project``; returns the record and
    the key. A ``global_admin`` key acts across projects; any other key only within its project (who may
    create which key is :meth:`clgate.store.scope.Scope.may_manage`)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)} (got {role!r})")
    if not re.fullmatch(PROJECT_PATTERN, project):
        raise ValueError(
            f"a project is 1-63 lower-case letters, digits and '-', starting with a letter or digit "
            f"(got {project!r})"
        )
    if key is None:
        key, key_id, digest = new_key()
    else:
        parts = split_key(key)
        if parts is None:
            raise ValueError(
                "a key must look like clg_<16 hex>_<43 url-safe characters> (make one with `clgate "
                "keys create`)"
            )
        key_id, digest = parts[0], _digest(parts[1])
    record = ApiKey(id=key_id, name=name, role=role, project=project, secret_sha256=digest)
    session.add(record)
    audit(session, actor, "key.created", "api_key", key_id, project=project, name=name, role=role)
    return record, key


def any_key(session: Session) -> bool:
    """Whether any key (active or revoked) exists."""
    return session.scalar(select(ApiKey.id).limit(1)) is not None


def bootstrap_admin(sessions: sessionmaker[Session], key: str) -> None:
    """Store ``key`` as the first, ``global_admin`` key when no key exists (several replicas may race: one
    wins)."""
    try:
        with session_scope(sessions) as s:
            if not any_key(s):
                create_key(
                    s, name="bootstrap-admin", role=Role.global_admin.name, actor="system:bootstrap", key=key
                )
    except IntegrityError:
        pass


def first_admin(sessions: sessionmaker[Session], *, actor: str) -> str | None:
    """A new ``global_admin`` key when no key exists (the key itself, shown once); ``None`` when one
    exists."""
    with session_scope(sessions) as s:
        if any_key(s):
            return None
        return create_key(s, name="first-admin", role=Role.global_admin.name, actor=actor)[1]


@dataclass(frozen=True)
class NewKey:
    """A key just created: its record and the key itself (shown once)."""

    record: ApiKey
    key: str

    def __getattr__(self, name: str):
        return getattr(self.record, name)


def all_keys(session: Session, project: str | None = None) -> Sequence[ApiKey]:
    """Every key (of ``project`` when given), oldest first (never their secrets: only hashes are stored)."""
    query = select(ApiKey).order_by(ApiKey.created_at)
    if project is not None:
        query = query.where(ApiKey.project == project)
    return session.scalars(query).all()


def revoke(session: Session, key_id: str, *, actor: str, project: str | None = None) -> ApiKey:
    """Revoke the key ``key_id`` (of ``project`` when given; a revoked key stays revoked; the caller
    commits); :class:`NotFound` when there is none."""
    record = session.get(ApiKey, key_id)
    if record is None or (project is not None and record.project != project):
        raise NotFound(f"no key {key_id}")
    if record.revoked_at is None:
        record.revoked_at = utcnow()
        audit(session, actor, "key.revoked", "api_key", key_id, project=record.project)
    return record

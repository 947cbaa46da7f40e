"""API keys: ``clg_<id>_<secret>``; only the SHA-256 of the secret is stored.

Keys are random (256 bits), so a plain SHA-256 is a safe verifier (no password stretching needed);
the comparison is constant-time.

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

from sqlalchemy.orm import Session

from clgate.store.db import audit
from clgate.store.models import DEFAULT_PROJECT, PROJECT_PATTERN, ApiKey, Role

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
    the key. An admin key acts across projects; any other key sees only its project's records."""
    if role not in Role.__members__:
        raise ValueError(f"role must be one of {', '.join(Role.__members__)} (got {role!r})")
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


def has_role(record: ApiKey, needed: Role) -> bool:
    return Role[record.role] >= needed

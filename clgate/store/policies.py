"""Policy versions: publish (immutable), find one for a job, list and read them within a scope."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from clgate.policy import PolicyError, parse_policy
from clgate.store.db import audit
from clgate.store.errors import Conflict, Invalid, NotFound
from clgate.store.models import Policy
from clgate.store.scope import Scope, total


def _version(session: Session, project: str, name: str, version: str) -> Policy | None:
    return session.scalar(
        select(Policy).where(Policy.project == project, Policy.name == name, Policy.version == version)
    )


def find(session: Session, name: str, version: str, project: str) -> Policy:
    """The policy ``name`` version ``version`` of ``project`` (a job is gated by its own project's policies);
    :class:`Invalid` when there is none."""
    p = _version(session, project, name, version)
    if p is None:
        raise Invalid(
            f"policy {name} version {version} does not exist in project {project!r} "
            "(create it with POST /v1/policies)"
        )
    return p


def publish(session: Session, document: dict[str, Any], *, where: Scope, actor: str) -> tuple[Policy, bool]:
    """Store the policy ``document`` as a new version of ``where``'s project; ``(policy, created)``.

    The identical version already stored is returned with ``created`` false; the same name and version
    with other content is a :class:`Conflict` (versions are immutable); an invalid document is
    :class:`Invalid` with its problems.
    """
    try:
        policy = parse_policy(document)
    except PolicyError as exc:
        raise Invalid("invalid policy: " + exc.problems[0], problems=exc.problems) from None
    canonical = policy.model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    project = where.project
    existing = _version(session, project, policy.name, str(policy.version))
    if existing is not None:
        if existing.sha256 == digest:
            return existing, False
        raise Conflict(
            f"policy {policy.name} version {policy.version} already exists with other content; "
            "versions are immutable: publish a new version"
        )
    p = Policy(
        project=project,
        name=policy.name,
        version=str(policy.version),
        document=canonical,
        sha256=digest,
        created_by=actor,
    )
    session.add(p)
    session.flush()
    audit(
        session,
        actor,
        "policy.created",
        "policy",
        p.id,
        project=project,
        name=p.name,
        version=p.version,
        sha256=digest,
    )
    return p, True


def page(
    session: Session, where: Scope, *, name: str | None, skip: int, limit: int
) -> tuple[Sequence[Policy], int]:
    """One page of the policy versions ``where`` sees (by name, oldest version first) and the total."""
    q = where.where(select(Policy), Policy.project)
    if name:
        q = q.where(Policy.name == name)
    count = total(session, q)
    rows = session.scalars(q.order_by(Policy.name, Policy.created_at).offset(skip).limit(limit)).all()
    return rows, count


def get(session: Session, where: Scope, name: str, version: str) -> Policy:
    """The policy ``name`` version ``version`` that ``where`` sees; :class:`NotFound` otherwise."""
    p = session.scalar(
        where.where(select(Policy), Policy.project)
        .where(Policy.name == name, Policy.version == version)
        .order_by(Policy.project)
        .limit(1)
    )
    if p is None:
        raise NotFound(f"policy {name} version {version} does not exist")
    return p

"""Reading the audit trail (events are appended by :func:`clgate.store.db.audit`, with the change they
record)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from clgate.store.models import AuditEvent
from clgate.store.scope import Scope, filtered, total


def page(
    session: Session,
    where: Scope,
    *,
    subject_type: str | None = None,
    subject_id: str | None = None,
    action: str | None = None,
    skip: int = 0,
    limit: int = 100,
) -> tuple[Sequence[AuditEvent], int]:
    """One page of the events ``where`` sees (newest first), with the filters, and the total."""
    q = filtered(
        where.where(select(AuditEvent), AuditEvent.project),
        (AuditEvent.subject_type, subject_type),
        (AuditEvent.subject_id, subject_id),
        (AuditEvent.action, action),
    )
    count = total(session, q)
    rows = session.scalars(q.order_by(AuditEvent.id.desc()).offset(skip).limit(limit)).all()
    return rows, count

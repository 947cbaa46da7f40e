"""Reading the audit trail (events are appended by :func:`clgate.store.db.audit`, with the change they
record)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clgate.store.models import AuditEvent
from clgate.store.scope import Scope


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
    q = where.where(select(AuditEvent), AuditEvent.project)
    if subject_type:
        q = q.where(AuditEvent.subject_type == subject_type)
    if subject_id:
        q = q.where(AuditEvent.subject_id == subject_id)
    if action:
        q = q.where(AuditEvent.action == action)
    count = session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = session.scalars(q.order_by(AuditEvent.id.desc()).offset(skip).limit(limit)).all()
    return rows, count

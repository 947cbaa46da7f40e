"""The queries of webhooks and their delivery log: register, list, disable; enqueue an event for every
webhook of a project that wants it (in the caller's transaction, so an event exists exactly when its
record does); claim due deliveries; record each attempt."""

from __future__ import annotations

import datetime as dt
import json
import secrets
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from clgate.store import Store
from clgate.store.db import session_scope
from clgate.store.models import Decision, Job, JobFile, Waiver, Webhook, WebhookDelivery, as_utc, utcnow
from clgate.store.scope import total

EVENTS = ("decision", "waiver")


@dataclass(frozen=True)
class Due:
    """A delivery to attempt now (read outside any session)."""

    id: str
    webhook_id: str
    url: str
    secret: str
    payload_format: str
    event: str
    body: str
    attempts: int


def create(
    s: Session, *, project: str, url: str, events: list[str], payload_format: str, created_by: str
) -> Webhook:
    """A new webhook with a fresh secret (32 random bytes, hex)."""
    hook = Webhook(
        project=project,
        url=url,
        secret=secrets.token_hex(32),
        events=sorted(set(events)),
        payload_format=payload_format,
        created_by=created_by,
    )
    s.add(hook)
    s.flush()
    return hook


def listed(s: Session, visible: Any) -> list[Webhook]:
    """Webhooks (``visible``: a condition on ``Webhook.project``), newest first."""
    return list(s.scalars(select(Webhook).where(visible).order_by(Webhook.created_at.desc(), Webhook.id)))


def deliveries(s: Session, webhook_id: str, *, skip: int, limit: int) -> tuple[list[WebhookDelivery], int]:
    """The webhook's delivery log, newest first, and its length."""
    q = select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id)
    count = total(s, q)
    rows = s.scalars(
        q.order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id).offset(skip).limit(limit)
    )
    return list(rows), count


def enqueue(s: Session, project: str, event: str, subject_id: str, payload: dict[str, Any]) -> int:
    """One pending delivery of ``payload`` per active webhook of ``project`` subscribed to ``event``."""
    hooks = s.scalars(select(Webhook).where(Webhook.project == project, Webhook.disabled_at.is_(None))).all()
    body = json.dumps({"event": event, **payload}, sort_keys=True, default=str)
    n = 0
    for hook in hooks:
        if event in hook.events:
            s.add(
                WebhookDelivery(
                    webhook_id=hook.id, project=project, event=event, subject_id=subject_id, body=body
                )
            )
            n += 1
    return n


def waiver_event(job: Job, waiver: Waiver) -> dict[str, Any]:
    """The webhook event of a waiver of a job's FAIL."""
    expires = as_utc(waiver.expires_at)
    return {
        "project": job.project,
        "job_id": job.id,
        "model_name": job.model_name,
        "waiver_id": waiver.id,
        "decision_id": waiver.decision_id,
        "approver": waiver.approver,
        "justification": waiver.justification,
        "expires_at": expires.isoformat() if expires else None,
    }


def claim_due(store: Store, *, limit: int, lease_s: float) -> list[Due]:
    """Pending deliveries whose time has come, each leased for ``lease_s`` (another API replica skips it)."""
    now = utcnow()
    out = []
    with session_scope(store.sessions) as s:
        rows = s.execute(
            select(WebhookDelivery, Webhook)
            .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            .where(WebhookDelivery.status == "pending", WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.next_attempt_at)
            .limit(limit)
        ).all()
        lease = now + dt.timedelta(seconds=lease_s)
        for d, hook in rows:
            result = s.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id == d.id, WebhookDelivery.next_attempt_at == d.next_attempt_at)
                .values(next_attempt_at=lease)
            )
            taken = cast("CursorResult[Any]", result).rowcount
            if taken:
                out.append(
                    Due(
                        d.id, hook.id, hook.url, hook.secret, hook.payload_format, d.event, d.body, d.attempts
                    )
                )
    return out


def record_attempt(
    store: Store, delivery_id: str, *, status_code: int | None, error: str | None, retry_in_s: float | None
) -> None:
    """One attempt: delivered (``error`` None), or failed and retried in ``retry_in_s`` (None: given up)."""
    with session_scope(store.sessions) as s:
        d = s.get(WebhookDelivery, delivery_id)
        if d is None:
            return
        d.attempts += 1
        d.last_status_code, d.last_error = status_code, error
        if error is None:
            d.status, d.delivered_at = "delivered", utcnow()
        elif retry_in_s is None:
            d.status = "failed"
        else:
            d.next_attempt_at = utcnow() + dt.timedelta(seconds=retry_in_s)


def decision_files(store: Store, job_id: str) -> tuple[dict[str, Any], str | None, str]:
    """A decided job's decision document, the stored path of its ``metrics.json`` (None without one) and
    its project (what the MLflow webhook format logs)."""
    with store.sessions() as s:
        d = s.scalar(select(Decision).where(Decision.job_id == job_id))
        if d is None:
            raise LookupError(f"job {job_id} has no decision")
        sha = s.scalar(select(JobFile.sha256).where(JobFile.job_id == job_id, JobFile.name == "metrics.json"))
        path = str(store.artifacts.verified_path(sha)) if sha else None
        return dict(d.document), path, d.project

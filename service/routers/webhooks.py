"""Webhooks: register a signed URL for the project's decisions and waivers, list, disable, read the
delivery log. Queries in :mod:`clgate.store.webhooks`; sending in :mod:`clgate.integrations.webhooks`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from clgate.schemas.api import (
    WebhookCreate,
    WebhookCreated,
    WebhookDeliveriesPublic,
    WebhookDeliveryPublic,
    WebhookPublic,
    WebhooksPublic,
)
from clgate.service.deps import Admin, SessionDep, Viewer, actor, scope
from clgate.service.limits import MAX_SKIP
from clgate.store import webhooks as records
from clgate.store.db import audit
from clgate.store.models import Webhook, utcnow

router = APIRouter(prefix="/webhooks", tags=["webhooks"])


def _public(hook: Webhook) -> WebhookPublic:
    return WebhookPublic.model_validate(hook, from_attributes=True)


@router.post(
    "",
    response_model=WebhookCreated,
    status_code=status.HTTP_201_CREATED,
    summary="Register a URL for the project's decisions and waivers (admin; the secret is shown once)",
)
def create_webhook(body: WebhookCreate, session: SessionDep, key: Admin):
    where = scope(key)
    hook = records.create(
        session,
        project=where.project,
        url=body.url,
        events=list(body.events),
        payload_format=body.payload_format,
        created_by=actor(key),
    )
    audit(session, actor(key), "webhook.created", "webhook", hook.id, project=hook.project, url=hook.url)
    session.commit()
    return WebhookCreated(**_public(hook).model_dump(), secret=hook.secret)


@router.get("", response_model=WebhooksPublic, summary="The project's webhooks")
def list_webhooks(session: SessionDep, key: Viewer):
    hooks = records.listed(session, scope(key).visible(Webhook.project))
    return WebhooksPublic(data=[_public(h) for h in hooks], count=len(hooks))


@router.delete("/{webhook_id}", response_model=WebhookPublic, summary="Disable a webhook (its log is kept)")
def disable_webhook(webhook_id: str, session: SessionDep, key: Admin):
    hook = scope(key).get(session, Webhook, webhook_id, f"webhook {webhook_id}")
    if hook.disabled_at is None:
        hook.disabled_at = utcnow()
        audit(session, actor(key), "webhook.disabled", "webhook", hook.id, project=hook.project)
        session.commit()
    return _public(hook)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=WebhookDeliveriesPublic,
    summary="The delivery log: every event, its attempts, the last answer",
)
def list_deliveries(
    webhook_id: str,
    session: SessionDep,
    key: Viewer,
    skip: Annotated[int, Query(ge=0, le=MAX_SKIP)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
):
    scope(key).get(session, Webhook, webhook_id, f"webhook {webhook_id}")
    rows, count = records.deliveries(session, webhook_id, skip=skip, limit=limit)
    return WebhookDeliveriesPublic(
        data=[WebhookDeliveryPublic.model_validate(d, from_attributes=True) for d in rows], count=count
    )

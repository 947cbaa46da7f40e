"""SQLAlchemy 2 records: API keys, artifacts, policies, jobs, decisions, waivers, baselines, audit events.

Tables are separate from the API's pydantic models (``clgate.schemas.api``). Decisions, waivers and audit
events are never updated nor deleted: the ORM refuses it (:func:`_refuse_change`) and the migrations add
database triggers that refuse it too; each of them is also hash-chained (:mod:`clgate.store.chain`).

Every record that a team owns carries its ``project``: keys, artifacts (through :class:`ProjectArtifact`,
since content is stored once), policies, jobs, models (by name), decisions, waivers, baselines and audit
events. :data:`DEFAULT_PROJECT` holds what existed before projects and what single-team use creates.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, ClassVar, overload

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from clgate.schemas.vocab import JobState

DEFAULT_PROJECT = "default"
PROJECT_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public key id, part of the key
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    project: Mapped[str] = mapped_column(String(64), default=DEFAULT_PROJECT, server_default=DEFAULT_PROJECT)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Artifact(Base):
    __tablename__ = "artifacts"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))
    filename: Mapped[str | None] = mapped_column(String(255), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(200), nullable=True)

    @property
    def ref(self) -> str:
        """How job specs and the API name the artifact: ``sha256:<64 hex>``."""
        return f"sha256:{self.sha256}"


class ProjectArtifact(Base):
    """An artifact uploaded by (so visible to) a project: the content is stored once, shared by hash."""

    __tablename__ = "project_artifacts"

    project: Mapped[str] = mapped_column(String(64), primary_key=True)
    sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Model(Base):
    """A model name and the project that owns it (the first to submit a job under it)."""

    __tablename__ = "models"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    project: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Policy(Base):
    __tablename__ = "policies"
    __table_args__ = (UniqueConstraint("project", "name", "version", name="uq_policy_project_name_version"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project: Mapped[str] = mapped_column(String(64), default=DEFAULT_PROJECT, server_default=DEFAULT_PROJECT)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(64))
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(200), nullable=True)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_model_created", "model_name", "created_at"),
        Index("ix_jobs_project_created", "project", "created_at"),
        Index("uq_jobs_idempotency_key", "idempotency_key", unique=True),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project: Mapped[str] = mapped_column(String(64), default=DEFAULT_PROJECT, server_default=DEFAULT_PROJECT)
    mode: Mapped[str] = mapped_column(String(16))  # retrain | evaluate | metrics | regate
    queue: Mapped[str] = mapped_column(String(16))  # gpu | cpu
    model_name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    logs: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)  # artifact hashes (metrics mode)
    policy_id: Mapped[str] = mapped_column(ForeignKey("policies.id"))
    baseline_job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id"), nullable=True)
    source_job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id"), nullable=True)  # regate
    state: Mapped[str] = mapped_column(String(16), default=JobState.queued.value)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    submitted_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    worker: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # reliability: a retried submission finds its job; a silent or crashing worker is noticed
    idempotency_key: Mapped[str | None] = mapped_column(String(300), nullable=True)  # "<key id>:<header>"
    request_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    claimed_at: Mapped[dt.datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )  # this attempt
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    worker_losses: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # the candidate (name, version) and build (commit, CI run) the job certifies (clgate.schemas.api)
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class JobFile(Base):
    """A result file of a job (log, metrics.json, report.html …), stored in the artifact store."""

    __tablename__ = "job_files"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))


class Decision(Base):
    """The gate decision of one job. One per job (the unique key makes redelivery harmless); never edited."""

    __tablename__ = "decisions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), unique=True)
    policy_id: Mapped[str] = mapped_column(ForeignKey("policies.id"))
    model_name: Mapped[str] = mapped_column(String(200), index=True)
    verdict: Mapped[str] = mapped_column(String(8))
    headline: Mapped[dict[str, Any]] = mapped_column(JSON)
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    project: Mapped[str] = mapped_column(String(64), default=DEFAULT_PROJECT, server_default=DEFAULT_PROJECT)
    # hash chain (clgate.store.chain): position, predecessor's hash, hash of (content, predecessor)
    seq: Mapped[int] = mapped_column(BigInteger, index=True, unique=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    record_hash: Mapped[str] = mapped_column(String(64))


class Waiver(Base):
    __tablename__ = "waivers"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    decision_id: Mapped[str] = mapped_column(ForeignKey("decisions.id"), index=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    justification: Mapped[str] = mapped_column(Text)
    approver: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    project: Mapped[str] = mapped_column(String(64), default=DEFAULT_PROJECT, server_default=DEFAULT_PROJECT)
    # hash chain (clgate.store.chain): position, predecessor's hash, hash of (content, predecessor)
    seq: Mapped[int] = mapped_column(BigInteger, index=True, unique=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    record_hash: Mapped[str] = mapped_column(String(64))


class Baseline(Base):
    __tablename__ = "baselines"

    model_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"))
    set_by: Mapped[str] = mapped_column(String(200))
    set_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    project: Mapped[str] = mapped_column(String(64), default=DEFAULT_PROJECT, server_default=DEFAULT_PROJECT)


class AuditEvent(Base):
    """Append-only: who did what to which record, and when."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_subject", "subject_type", "subject_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    subject_type: Mapped[str] = mapped_column(String(32))
    subject_id: Mapped[str] = mapped_column(String(200))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    project: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    # hash chain (clgate.store.chain): position, predecessor's hash, hash of (content, predecessor)
    seq: Mapped[int] = mapped_column(BigInteger, index=True, unique=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    record_hash: Mapped[str] = mapped_column(String(64))


class ChainHead(Base):
    """The last link of each hash chain (``decisions``, ``waivers``, ``audit_events``).

    Writers update it in the transaction that appends a record, so concurrent appends take turns (row
    lock on PostgreSQL, the write lock on SQLite); ``clgate audit verify`` checks that the records end
    here, which tells a deleted tail from an intact chain.
    """

    __tablename__ = "chain_heads"

    chain: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, default=0)
    record_hash: Mapped[str] = mapped_column(String(64))
    at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class HistoryEntry(Base):
    """One signed link of the record history (:mod:`clgate.store.history`): a family's ``seq``-th state of
    one record (``subject``), its content's SHA-256, the previous link's hash and an Ed25519 signature."""

    __tablename__ = "history"
    __table_args__ = (
        UniqueConstraint("family", "seq", name="uq_history_family_seq"),
        Index("ix_history_subject", "family", "subject"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    family: Mapped[str] = mapped_column(String(32))
    seq: Mapped[int] = mapped_column(BigInteger)
    subject: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))  # state | legacy | deleted
    content_sha256: Mapped[str] = mapped_column(String(64))
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    prev_hash: Mapped[str] = mapped_column(String(64))
    record_hash: Mapped[str] = mapped_column(String(64))
    key_id: Mapped[str] = mapped_column(String(16))
    signature: Mapped[str] = mapped_column(String(128))


class SigningKey(Base):
    """A public key that signed history, introduced by a signed ``signing_keys`` entry (by itself for the
    first key, by the key before it after a rotation)."""

    __tablename__ = "signing_keys"

    key_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    public_key: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    introduced_by: Mapped[str] = mapped_column(String(16))


class WorkerHeartbeat(Base):
    """A worker (Celery or embedded) alive and consuming the named queues."""

    __tablename__ = "worker_heartbeats"

    hostname: Mapped[str] = mapped_column(String(200), primary_key=True)
    queues: Mapped[str] = mapped_column(String(200))
    last_seen: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ImmutableRecordError(RuntimeError):
    pass


def _refuse_change(mapper, connection, target) -> None:
    raise ImmutableRecordError(f"{type(target).__name__} records are never edited nor deleted")


for _cls in (Decision, Waiver, AuditEvent):
    event.listen(_cls, "before_update", _refuse_change)
    event.listen(_cls, "before_delete", _refuse_change)


@overload
def as_utc(value: dt.datetime) -> dt.datetime: ...
@overload
def as_utc(value: None) -> None: ...
@overload
def as_utc(value: dt.datetime | None) -> dt.datetime | None: ...
def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """SQLite returns naive datetimes; every stored time is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=dt.UTC)


class Webhook(Base):
    """A URL of a project that receives its decisions and waivers, signed with the webhook's secret."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project: Mapped[str] = mapped_column(String(64), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(128))  # the HMAC key (the receiver holds it too)
    events: Mapped[list[str]] = mapped_column(JSON)
    payload_format: Mapped[str] = mapped_column(String(16), default="clgate")
    created_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    disabled_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class WebhookDelivery(Base):
    """One event for one webhook: its body as sent, and its attempts (the delivery log)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id"), index=True)
    project: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(32))
    subject_id: Mapped[str] = mapped_column(String(32))
    body: Mapped[str] = mapped_column(Text)  # the exact bytes signed and sent (UTF-8 JSON)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending, delivered, failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    next_attempt_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    delivered_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

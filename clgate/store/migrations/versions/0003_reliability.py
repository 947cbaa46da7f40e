"""reliability: idempotency keys of submissions, per-attempt claim time, job heartbeats, worker losses.

Revision ID: 0003r
Revises: 0002p
Create Date: 2026-11-23 04:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0003r"
down_revision = "0002p"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(length=300), nullable=True))
        batch.add_column(sa.Column("request_sha256", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("worker_losses", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("uq_jobs_idempotency_key", "jobs", ["idempotency_key"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_jobs_idempotency_key", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in ("worker_losses", "heartbeat_at", "claimed_at", "request_sha256", "idempotency_key"):
            batch.drop_column(column)

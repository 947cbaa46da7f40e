"""job provenance: the candidate's version and the build (commit, CI run) a job certifies.

Revision ID: 0006b
Revises: 0005h
Create Date: 2026-11-24 23:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006b"
down_revision = "0005h"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("provenance", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("provenance")

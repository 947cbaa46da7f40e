"""signed history: ``history`` (signed, chained entries per record family) and ``signing_keys``.

Both tables are append-only (triggers refusing UPDATE, DELETE and, on PostgreSQL, TRUNCATE; the
application role gets SELECT and INSERT only). Each family gets its head row in ``chain_heads``
(``h:<family>``, empty). The migration holds no key, so it signs nothing: the first process that opens
the store with the signing key seals the records written before, one signed ``legacy`` entry each and a
``seal`` entry counting them (``clgate.store.history``).

Revision ID: 0005h
Revises: 0004w
"""

import sqlalchemy as sa
from alembic import op

revision = "0005h"
down_revision = "0004w"
branch_labels = None
depends_on = None

FAMILIES = (
    "signing_keys",
    "api_keys",
    "policies",
    "jobs",
    "decisions",
    "waivers",
    "baselines",
    "audit_events",
)
TABLES = ("history", "signing_keys")


def upgrade() -> None:
    op.create_table(
        "history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("family", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("content_sha256", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("record_hash", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(16), nullable=False),
        sa.Column("signature", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("family", "seq", name="uq_history_family_seq"),
    )
    op.create_index("ix_history_subject", "history", ["family", "subject"])
    op.create_table(
        "signing_keys",
        sa.Column("key_id", sa.String(16), nullable=False),
        sa.Column("public_key", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("introduced_by", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("key_id"),
    )
    heads = sa.table(
        "chain_heads",
        sa.column("chain", sa.String),
        sa.column("seq", sa.BigInteger),
        sa.column("record_hash", sa.String),
    )
    op.bulk_insert(heads, [{"chain": f"h:{f}", "seq": 0, "record_hash": "0" * 64} for f in FAMILIES])
    _append_only_triggers(TABLES)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table in TABLES:
        if dialect == "postgresql":
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {table}_append_only()")
    op.execute("DELETE FROM chain_heads WHERE chain LIKE 'h:%'")
    op.drop_table("signing_keys")
    op.drop_index("ix_history_subject", table_name="history")
    op.drop_table("history")


def _append_only_triggers(tables) -> None:
    dialect = op.get_bind().dialect.name
    for table in tables:
        if dialect == "sqlite":
            for verb in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{table} are append-only'); END"
                )
        elif dialect == "postgresql":
            op.execute(
                f"CREATE OR REPLACE FUNCTION {table}_append_only() RETURNS trigger AS $$ "
                f"BEGIN RAISE EXCEPTION '{table} are append-only'; END; $$ LANGUAGE plpgsql"
            )
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {table}_append_only()"
            )
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_append_only()"
            )

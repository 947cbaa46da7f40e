"""projects and tamper-evident history.

Every team-owned record gets a ``project`` (existing rows: ``default``); model names and artifacts are
owned per project (``models``, ``project_artifacts``); policy versions are unique per project.
Decisions, waivers and audit events get a hash chain (``seq``, ``prev_hash``, ``record_hash``, existing
rows chained in their time order) and ``chain_heads``; waivers become append-only like decisions and
audit events (triggers refusing UPDATE and DELETE).

Revision ID: 0002p
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002p"
down_revision = "0001"
branch_labels = None
depends_on = None

DEFAULT = "default"
OWNED = ("api_keys", "policies", "jobs", "decisions", "waivers", "baselines")
CHAINED = ("decisions", "waivers", "audit_events")
TIME = {"decisions": "created_at", "waivers": "created_at", "audit_events": "at"}


def upgrade() -> None:
    _drop_triggers(("decisions", "audit_events"))
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("project", sa.String(64), nullable=False, server_default=DEFAULT)
            )
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("project", sa.String(64), nullable=True))
        batch.create_index("ix_audit_events_project", ["project"])
    with op.batch_alter_table("jobs") as batch:
        batch.create_index("ix_jobs_project_created", ["project", "created_at"])
    with op.batch_alter_table("policies") as batch:
        batch.drop_constraint("uq_policy_name_version", type_="unique")
        batch.create_unique_constraint(
            "uq_policy_project_name_version", ["project", "name", "version"]
        )
    op.create_table(
        "project_artifacts",
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("sha256", sa.String(64), sa.ForeignKey("artifacts.sha256"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project", "sha256"),
    )
    op.create_table(
        "models",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("models") as batch:
        batch.create_index("ix_models_project", ["project"])
    op.create_table(
        "chain_heads",
        sa.Column("chain", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("record_hash", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("chain"),
    )
    for table in CHAINED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("seq", sa.BigInteger(), nullable=True))
            batch.add_column(sa.Column("prev_hash", sa.String(64), nullable=True))
            batch.add_column(sa.Column("record_hash", sa.String(64), nullable=True))

    bind = op.get_bind()
    bind.execute(
        sa.text(
            f"INSERT INTO project_artifacts (project, sha256, created_at) "
            f"SELECT '{DEFAULT}', sha256, created_at FROM artifacts"
        )
    )
    bind.execute(
        sa.text(
            f"INSERT INTO models (name, project, created_at) "
            f"SELECT model_name, '{DEFAULT}', MIN(created_at) FROM jobs GROUP BY model_name"
        )
    )
    bind.execute(
        sa.text("UPDATE audit_events SET project = :p WHERE subject_type = 'job'"), {"p": DEFAULT}
    )
    for table in CHAINED:
        _chain_existing(bind, table)

    for table in CHAINED:
        with op.batch_alter_table(table) as batch:
            batch.alter_column("seq", existing_type=sa.BigInteger(), nullable=False)
            batch.alter_column("prev_hash", existing_type=sa.String(64), nullable=False)
            batch.alter_column("record_hash", existing_type=sa.String(64), nullable=False)
            batch.create_index(f"ix_{table}_seq", ["seq"], unique=True)
    _append_only_triggers(CHAINED)


def _chain_existing(bind, table: str) -> None:
    """Chain the rows that exist, in time order, and record the chain's head."""
    from sqlalchemy.orm import Session

    from clgate.store import chain

    cls, columns, time_column = chain.CHAINS[table]
    t = sa.table(
        table, *(sa.column(c) for c in ("id", *columns, "seq", "prev_hash", "record_hash"))
    )
    # read the JSON columns as JSON through the ORM classes' column types
    with Session(bind=bind) as session:
        rows = session.execute(
            sa.select(*(getattr(cls, c) for c in ("id", *columns))).order_by(
                getattr(cls, time_column), cls.id
            )
        ).all()
    seq, prev, last_at = 0, chain.GENESIS, None
    for row in rows:
        values = {c: chain._normalised(getattr(row, c)) for c in columns}
        seq += 1
        record_hash = chain.link_hash(table, seq, prev, values)
        bind.execute(
            sa.update(t)
            .where(t.c.id == row.id)
            .values(seq=seq, prev_hash=prev, record_hash=record_hash)
        )
        prev, last_at = record_hash, values[time_column]
    bind.execute(
        sa.insert(
            sa.table(
                "chain_heads",
                sa.column("chain"),
                sa.column("seq"),
                sa.column("record_hash"),
                sa.column("at"),
            )
        ).values(chain=table, seq=seq, record_hash=prev, at=last_at)
    )


def downgrade() -> None:
    _drop_triggers(CHAINED)
    for table in CHAINED:
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_seq")
            batch.drop_column("record_hash")
            batch.drop_column("prev_hash")
            batch.drop_column("seq")
    op.drop_table("chain_heads")
    with op.batch_alter_table("models") as batch:
        batch.drop_index("ix_models_project")
    op.drop_table("models")
    op.drop_table("project_artifacts")
    with op.batch_alter_table("policies") as batch:
        batch.drop_constraint("uq_policy_project_name_version", type_="unique")
        batch.create_unique_constraint("uq_policy_name_version", ["name", "version"])
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_project_created")
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_index("ix_audit_events_project")
        batch.drop_column("project")
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("project")
    _append_only_triggers(("decisions", "audit_events"))


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
            # TRUNCATE fires no row trigger: a statement trigger refuses it (for the owner too)
            op.execute(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_append_only()"
            )


def _drop_triggers(tables) -> None:
    dialect = op.get_bind().dialect.name
    for table in tables:
        if dialect == "sqlite":
            for verb in ("update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_no_{verb}")
        elif dialect == "postgresql":
            op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {table}_append_only()")

"""Database engine, sessions, migrations and the audit helper."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.orm import Session, sessionmaker

from clgate.store import chain as _chain  # noqa: F401 - registers the hook that chains appended records
from clgate.store import history as _history  # noqa: F401 - then the hook that signs the history
from clgate.store.models import AuditEvent

STORE_DIR = Path(__file__).resolve().parent
ALEMBIC_INI = STORE_DIR / "alembic.ini"


def make_engine(
    url: str, *, pool_size: int = 16, pool_timeout_s: float = 10.0, busy_timeout_s: float = 5.0
) -> Engine:
    """An engine for ``url`` with a bounded pool of ``pool_size`` connections (no overflow).

    The API admits at most ``pool_size - 8`` requests at once (``CLGATE_API_CONCURRENCY``), each holding
    at most one connection, so a request never waits for a connection while holding another. SQLite gets
    WAL, foreign keys and a busy timeout of ``busy_timeout_s`` (a locked database fails fast, as 503).
    """
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        pool = (
            {}
            if path in ("", ":memory:")
            else {
                "pool_size": pool_size,
                "max_overflow": 0,
                "pool_timeout": pool_timeout_s,
            }
        )
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": busy_timeout_s}, **pool
        )
        busy_ms = int(busy_timeout_s * 1000)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
            try:
                cursor.execute("PRAGMA journal_mode=WAL")
            except Exception:
                logging.getLogger("clgate.store").warning("SQLite WAL mode not set", exc_info=True)
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    return create_engine(
        url, pool_pre_ping=True, pool_size=pool_size, max_overflow=0, pool_timeout=pool_timeout_s
    )


def pool_status(engine: Engine) -> tuple[int, int]:
    """(connections checked out, pool capacity) of ``engine``'s pool; capacity 0 when it is unbounded."""
    pool = engine.pool
    size = getattr(pool, "size", None)
    checked_out = getattr(pool, "checkedout", None)
    if not callable(size) or not callable(checked_out):
        return 0, 0
    overflow = getattr(pool, "_max_overflow", 0)
    return int(checked_out()), int(size()) + max(0, int(overflow))


def check_writable(engine: Engine, *, timeout_s: float = 2.0) -> str | None:
    """Why the database cannot take a write now (locked, read-only, unreachable …), or ``None``.

    SQLite: takes the write lock in a transaction that is rolled back (``BEGIN IMMEDIATE``). PostgreSQL:
    reads only — the server is not a standby, the schema version is readable and the role may insert
    jobs — so the least-privilege app role (SELECT only on ``alembic_version``) is ready too.
    """
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                raw = conn.connection.dbapi_connection
                assert raw is not None  # None only once the pooled connection is closed; this one is open
                cursor = raw.cursor()
                busy_ms = cursor.execute("PRAGMA busy_timeout").fetchone()[0]
                cursor.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
                try:
                    if raw.in_transaction:
                        raw.rollback()
                    cursor.execute("BEGIN IMMEDIATE")
                    cursor.execute("UPDATE alembic_version SET version_num = version_num")
                    cursor.execute("ROLLBACK")
                finally:
                    if raw.in_transaction:
                        raw.rollback()
                    cursor.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
                    cursor.close()
            else:
                return _postgres_can_serve(conn, timeout_s)
    except Exception as exc:
        return describe_db_error(exc)
    return None


def _postgres_can_serve(conn, timeout_s: float) -> str | None:
    """PostgreSQL, by reading only (the app role may not write the schema version): the server takes
    writes, the schema version row is readable, and this role may insert jobs."""
    with conn.begin() as tx:
        conn.execute(text(f"SET LOCAL lock_timeout = {int(timeout_s * 1000)}"))
        conn.execute(text(f"SET LOCAL statement_timeout = {int(timeout_s * 1000)}"))
        if conn.execute(text("SELECT pg_is_in_recovery()")).scalar():
            tx.rollback()
            return "the database is read-only (a standby in recovery)"
        conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        may_insert = conn.execute(text("SELECT has_table_privilege('jobs', 'INSERT')")).scalar()
        tx.rollback()
    return None if may_insert else "the database is read-only for this role (no INSERT on jobs)"


def describe_db_error(exc: BaseException) -> str:
    """A one-line reason for a database fault (locked, read-only, unreachable, pool exhausted)."""
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(exc, PoolTimeout):
        return "all database connections are in use (pool exhausted)"
    message = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0] if str(exc).strip() else ""
    lowered = message.lower()
    if "locked" in lowered or "lock timeout" in lowered:
        return f"the database is locked ({message})"
    if "readonly" in lowered or "read-only" in lowered or "read only" in lowered:
        return f"the database is read-only ({message})"
    return f"the database is unavailable ({type(exc).__name__}: {message[:200]})"


def make_sessionmaker(engine: Engine, *, signer: Any = None) -> sessionmaker[Session]:
    """Sessions of ``engine``; with ``signer`` (a :class:`clgate.store.signing.Signer`) they sign the
    record history. Without one, records are written unsigned and ``clgate audit verify`` names them."""
    return sessionmaker(engine, expire_on_commit=False, info={"signer": signer} if signer else {})


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(STORE_DIR / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply the Alembic migrations up to ``revision``."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:  # the package ships its migrations: none found is a broken install
        raise RuntimeError(f"no Alembic migration under {STORE_DIR / 'migrations'}: reinstall clgate")
    return head


def current_revision(engine: Engine) -> str | None:
    if not inspect(engine).has_table("alembic_version"):
        return None
    with engine.connect() as conn:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def wait_for_schema(engine: Engine, timeout_s: float = 60.0) -> None:
    """Block until the database is at the migrations' head (workers wait for the API or a migrate job)."""
    head = head_revision()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if current_revision(engine) == head:
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"database schema is not at revision {head}: run `clgate db upgrade` (or start the API with "
                "CLGATE_AUTO_MIGRATE=true)"
            )
        time.sleep(0.5)


def audit(
    session: Session,
    actor: str,
    action: str,
    subject_type: str,
    subject_id: str,
    *,
    project: str | None = None,
    **details: Any,
) -> None:
    """Append one audit event (committed with the change it records; hash-chained at flush).

    ``project`` is the project of the subject; for a job it is looked up when not given.
    """
    session.add(
        AuditEvent(
            actor=actor,
            action=action,
            subject_type=subject_type,
            subject_id=str(subject_id),
            details=details,
            project=project,
        )
    )


# Rights of the application role on PostgreSQL (`clgate db grant`): what the API and the workers do.
READ_APPEND = (
    "decisions",
    "waivers",
    "audit_events",
    "job_files",
    "project_artifacts",
    "models",
    "policies",
    "history",
    "signing_keys",
)
READ_ONLY = ("alembic_version",)
CHAIN_HEADS = ("chain_heads",)


def app_role_grants(tables: list[str]) -> dict[str, str]:
    """``{table: privileges}`` for the application role: append-only tables get SELECT and INSERT; the
    chain heads SELECT and UPDATE; the schema version SELECT; every other table SELECT, INSERT, UPDATE,
    DELETE. Never TRUNCATE, REFERENCES nor TRIGGER.

    >>> app_role_grants(["audit_events", "jobs", "chain_heads"])["audit_events"]
    'SELECT, INSERT'
    >>> app_role_grants(["jobs"])["jobs"]
    'SELECT, INSERT, UPDATE, DELETE'
    """
    out = {}
    for table in tables:
        if table in READ_APPEND:
            out[table] = "SELECT, INSERT"
        elif table in READ_ONLY:
            out[table] = "SELECT"
        elif table in CHAIN_HEADS:
            out[table] = "SELECT, UPDATE"
        else:
            out[table] = "SELECT, INSERT, UPDATE, DELETE"
    return out


def grant_app_role(engine: Engine, role: str) -> None:
    """Give ``role`` (an existing PostgreSQL role) exactly the application's rights on the schema's tables
    and sequences, after revoking everything it had; run as the owner of the tables (the migration role)."""
    import re

    if engine.dialect.name != "postgresql":
        raise ValueError("database roles are a PostgreSQL feature (SQLite has no users: protect the file)")
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", role):
        raise ValueError(f"role name {role!r}: use lower-case letters, digits and '_'")
    with engine.begin() as conn:
        if conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).scalar() is None:
            raise ValueError(
                f"role {role!r} does not exist (create it first: CREATE ROLE {role} LOGIN PASSWORD …)"
            )
        owner = conn.execute(text("SELECT current_user")).scalar()
        if owner == role:
            raise ValueError(
                f"{role!r} is the role running the migrations: the application needs a role of its own"
            )
        tables = inspect(conn).get_table_names()
        conn.execute(text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
        for table, privileges in app_role_grants(tables).items():
            conn.execute(text(f'REVOKE ALL ON TABLE "{table}" FROM "{role}"'))
            conn.execute(text(f'GRANT {privileges} ON TABLE "{table}" TO "{role}"'))
        conn.execute(text(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"'))


class StoreUnreachable(RuntimeError):
    """A record store, job broker or data folder that cannot be reached or used: the operator's settings
    (exit 2 on the command line, naming the setting and the host), not a bug in clgate."""

    def __init__(self, setting: str, where: str, reason: str) -> None:
        super().__init__(f"{setting} ({where}): {reason}")
        self.setting = setting
        self.where = where
        self.reason = reason


def _is(exc: BaseException, module: str, names: tuple[str, ...]) -> bool:
    """``exc`` is one of ``names`` from ``module`` (by class, without importing that module)."""
    return any(c.__module__.startswith(module) and c.__name__ in names for c in type(exc).__mro__)


def _shown_url(url: str | None) -> str:
    """The URL without its password (``postgresql+psycopg://app:***@db:5432/clgate``)."""
    if not url:
        return "unset"
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: show its scheme and host part only
        return url.split("@")[-1]


def as_settings_error(
    exc: BaseException, *, database_url: str | None, broker_url: str | None, data_dir: Any = None
) -> StoreUnreachable | None:
    """The settings error behind ``exc`` (database, broker or data folder that cannot be reached or used),
    or ``None`` when ``exc`` is something else (then it may well be a bug)."""
    if _is(exc, "sqlalchemy", ("OperationalError", "InterfaceError")):
        return StoreUnreachable("CLGATE_DATABASE_URL", _shown_url(database_url), describe_db_error(exc))
    if _is(exc, "redis", ("ConnectionError", "TimeoutError", "AuthenticationError")) or _is(
        exc, "kombu", ("OperationalError",)
    ):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreUnreachable(
            "CLGATE_BROKER_URL", _shown_url(broker_url), f"the job broker is unavailable ({first})"
        )
    if isinstance(exc, OSError) and data_dir is not None and getattr(exc, "filename", None):
        name = str(exc.filename)
        if name.startswith(str(data_dir)) or str(data_dir).startswith(name):
            return StoreUnreachable(
                "CLGATE_DATA_DIR", str(data_dir), f"{exc.strerror or type(exc).__name__}: {name}"
            )
    return None

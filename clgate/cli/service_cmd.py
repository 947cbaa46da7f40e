"""``clgate serve``, ``clgate worker``, ``clgate exporter``, ``clgate keys create``, ``clgate db
upgrade|grant``,
``clgate audit …`` (in :mod:`clgate.cli.audit_cmd`): the validation service.

Settings come from ``CLGATE_*`` environment variables (see docs/service.md); options here override them.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

keys_app = typer.Typer(
    help="API keys of the service (stored hashed; the key is printed once).", no_args_is_help=True
)
db_app = typer.Typer(
    help="The service's record store (Alembic migrations, database roles).", no_args_is_help=True
)


def _settings(data_dir: Path | None = None, **overrides):
    from pydantic import ValidationError

    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store.settings import load_settings

    if data_dir is not None:
        overrides["data_dir"] = data_dir
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            name = "CLGATE_" + "_".join(str(p) for p in err["loc"]).upper()
            typer.echo(f"error: {name}: {err['msg'].removeprefix('Value error, ')}", err=True)
        raise typer.Exit(2) from None


def _sessions(settings, *, migrate: bool = True, sign: bool = True):
    """Sessions on the record store; migrate it first, or (``migrate=False``) wait until a migration job
    has. ``sign=False``: a reader (the exporter), which holds no signing key and creates none."""
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store import open_store
    from clgate.store.db import wait_for_schema

    store = open_store(settings, migrate=migrate, sign=sign)
    wait_for_schema(store.engine, timeout_s=120)
    return store.sessions


def _announce_sandbox(settings, *, required: bool = False) -> None:
    """Say on stderr when submitted models would run unconfined or not at all; with ``required``
    (CLGATE_SANDBOX=bwrap) refuse to start without a working bwrap."""
    # lazy: CLI — `clgate --help` loads no command's dependencies
    from clgate.workers.sandbox import announcement, sandbox_status

    status = sandbox_status(settings)
    if required and status.mode is None:
        typer.echo(f"error: CLGATE_SANDBOX=bwrap: {status.detail}; refusing to start", err=True)
        raise typer.Exit(2)
    message = announcement(status)
    if message:
        typer.echo(f"warning: {message}", err=True)


def _check_broker(broker_url: str, *, timeout_s: float = 3.0) -> None:
    """Exit 2 naming CLGATE_BROKER_URL (password hidden) when the broker does not answer a ping within
    ``timeout_s``: Celery would otherwise retry an unreachable broker forever, silently."""
    # lazy: CLI — `clgate --help` loads neither Redis nor SQLAlchemy
    import redis

    from clgate.store.db import as_settings_error

    client = redis.Redis.from_url(broker_url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        client.ping()
    except redis.RedisError as exc:
        found = as_settings_error(exc, database_url=None, broker_url=broker_url)
        reason = found or f"CLGATE_BROKER_URL: the job broker is unusable ({type(exc).__name__}: {exc})"
        typer.echo(f"error: {reason}", err=True)
        raise typer.Exit(2) from None
    finally:
        client.close()


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    data_dir: Path = typer.Option(
        None, "--data-dir", help="Data folder (default $CLGATE_DATA_DIR or ./clgate-data)."
    ),
    workers: int = typer.Option(
        1,
        min=1,
        max=256,
        help="API processes on one address, sharing the store (Celery mode only; the embedded mode needs 1).",
    ),
    log_level: str = typer.Option("info", help="uvicorn log level."),
    access_log: bool = typer.Option(True, help="Log every request (uvicorn's access log)."),
) -> None:
    """Run the API. Without CLGATE_BROKER_URL the jobs run embedded, in a background executor."""
    import uvicorn

    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store.keys import bootstrap_admin, first_admin

    settings = _settings(data_dir)
    if settings.embedded and workers > 1:
        typer.echo(
            "error: --workers > 1 needs CLGATE_BROKER_URL (the embedded executor lives in one process)",
            err=True,
        )
        raise typer.Exit(2)
    sessions = _sessions(settings, migrate=settings.auto_migrate)
    if settings.bootstrap_admin_key:
        try:
            bootstrap_admin(sessions, settings.bootstrap_admin_key)
        except ValueError as exc:
            typer.echo(f"error: CLGATE_BOOTSTRAP_ADMIN_KEY: {exc}", err=True)
            raise typer.Exit(2) from None
    key = None if settings.bootstrap_admin_key else first_admin(sessions, actor="system:serve")
    if key is not None:  # the key goes to its file only: service logs capture stdout and stderr
        key_file = settings.data_dir / "admin.key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(key + "\n")
        key_file.chmod(0o600)
        typer.echo(f"created the first admin key: it is in {key_file} (mode 600), and nowhere else", err=True)
    if settings.embedded:  # jobs run in this process: say now how their models are confined
        _announce_sandbox(settings)
    mode = "embedded executor" if settings.embedded else f"Celery via {settings.broker_url.split('@')[-1]}"
    docs = "docs /docs" if settings.public_docs else "OpenAPI /openapi.json with a key"
    typer.echo(
        f"clgate API on http://{host}:{port} ({docs}) — jobs: {mode}; data: {settings.data_dir}", err=True
    )
    os.environ["CLGATE_DATA_DIR"] = str(settings.data_dir)
    os.environ["CLGATE_AUTO_MIGRATE"] = "false"  # done above, once: never by each API process
    os.environ["CLGATE_API_PROCESSES"] = str(workers)
    uvicorn.run(
        "clgate.service.app:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=access_log,
    )


def worker(
    queues: str = typer.Option(
        "gpu,cpu", help="Comma-separated queues to consume: gpu (retrain/evaluate), cpu (metrics, re-gate)."
    ),
    concurrency: int = typer.Option(1, help="Worker processes (use 1 per GPU)."),
    hostname: str = typer.Option(None, help="Celery node name (default clgate-<queues>@<host>)."),
    loglevel: str = typer.Option("info", help="Log level."),
) -> None:
    """Run a Celery worker for the service's queues (needs CLGATE_BROKER_URL=redis://…)."""
    settings = _settings()
    if settings.broker_url is None:
        typer.echo(
            "error: CLGATE_BROKER_URL: set it to the Redis broker (redis://host:6379/0); "
            "without a broker `clgate serve` runs jobs itself",
            err=True,
        )
        raise typer.Exit(2)
    wanted = [q.strip() for q in queues.split(",") if q.strip()]
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.schemas.vocab import QUEUES

    unknown = [q for q in wanted if q not in QUEUES]
    if not wanted or unknown:
        typer.echo(
            f"error: --queues: unknown queue(s) {', '.join(unknown) or '(none)'}; use gpu and/or cpu",
            err=True,
        )
        raise typer.Exit(2)
    _announce_sandbox(settings, required=settings.sandbox == "bwrap")  # configuration first, then the broker
    _check_broker(settings.broker_url)
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.workers.app import app as celery_app

    argv = [
        "worker",
        "-Q",
        ",".join(wanted),
        "--concurrency",
        str(concurrency),
        "--loglevel",
        loglevel,
        "--prefetch-multiplier",
        "1",
        "-n",
        hostname or f"clgate-{'-'.join(wanted)}@%h",
    ]
    celery_app.worker_main(argv)


def exporter(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 in a container)."),
    port: int = typer.Option(9108, help="Metrics port: GET /metrics, no key (keep it inside the cluster)."),
    data_dir: Path = typer.Option(None, "--data-dir", help="Data folder (default $CLGATE_DATA_DIR)."),
) -> None:
    """Export the deployment's series (decisions, jobs, queues, workers) once per deployment.

    Run exactly one per deployment in Celery mode (CLGATE_BROKER_URL set): the API replicas then
    export only per-process series, so no sum counts a model or a queue once per replica. It reads
    the record store (waits for its schema; never migrates) and the broker's queue lengths."""
    import signal
    import threading

    from prometheus_client import start_http_server

    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.service.dispatch import CeleryDispatcher
    from clgate.service.metrics import exporter_registry

    settings = _settings(data_dir)
    if settings.broker_url is None:
        typer.echo(
            "error: CLGATE_BROKER_URL: the exporter is for Celery mode; without a broker "
            "`clgate serve` runs one process and exports these series itself",
            err=True,
        )
        raise typer.Exit(2)
    if not 0 < port < 65536:
        typer.echo(f"error: --port: {port} is not a TCP port (1-65535)", err=True)
        raise typer.Exit(2)
    sessions = _sessions(settings, migrate=False, sign=False)  # it reads: no signing key (deploy/)
    broker = CeleryDispatcher(settings)  # a Redis client only: LLEN of the queue lists, nothing sent
    registry = exporter_registry(
        sessions,
        queue_lengths=broker.queue_lengths,
        worst_classes=settings.worst_classes,
        worker_stale_s=settings.worker_stale_s,
    )
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        typer.echo(f"error: --host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"clgate exporter on http://{host}:{port}/metrics (store {settings.data_dir}, "
        f"broker {settings.broker_url.split('@')[-1]})",
        err=True,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    broker.close()


@keys_app.command("create")
def keys_create(
    # clgate.schemas.vocab.ROLES, spelled here to keep pydantic out of the CLI's start (a test compares them)
    role: str = typer.Option(..., help="viewer, submitter, approver, admin or global_admin."),
    name: str = typer.Option(..., help="Who or what uses the key (shown in the audit trail)."),
    project: str = typer.Option(
        "default",
        help="The project whose records the key sees and creates (an admin key acts across projects).",
    ),
    data_dir: Path = typer.Option(None, "--data-dir", help="Data folder (default $CLGATE_DATA_DIR)."),
) -> None:
    """Create an API key and print it (only its hash is stored)."""
    import re

    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.schemas.vocab import ROLES
    from clgate.store.db import session_scope
    from clgate.store.keys import create_key
    from clgate.store.models import PROJECT_PATTERN

    if role not in ROLES:
        typer.echo(f"error: --role: {role!r} is not one of {', '.join(ROLES)}", err=True)
        raise typer.Exit(2)
    if not re.fullmatch(PROJECT_PATTERN, project):
        typer.echo(f"error: --project: {project!r} is not 1-63 lower-case letters, digits and '-'", err=True)
        raise typer.Exit(2)
    settings = _settings(data_dir)
    with session_scope(_sessions(settings)) as s:
        _, key = create_key(
            s, name=name, role=role, project=project, actor=f"cli:{os.environ.get('USER', 'unknown')}"
        )
    typer.echo(key)


@db_app.command("upgrade")
def db_upgrade(
    data_dir: Path = typer.Option(None, "--data-dir", help="Data folder (default $CLGATE_DATA_DIR)."),
) -> None:
    """Apply the database migrations (run once per release before the API and workers start)."""
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store import open_store
    from clgate.store.db import current_revision

    store = open_store(_settings(data_dir), migrate=True, sign=False)  # the migration holds no key
    typer.echo(f"database at revision {current_revision(store.engine)}")
    store.close()


@db_app.command("grant")
def db_grant(
    app_role: str = typer.Argument(..., help="The PostgreSQL role the API and workers connect as."),
    data_dir: Path = typer.Option(None, "--data-dir", help="Data folder (default $CLGATE_DATA_DIR)."),
) -> None:
    """Grant the application role only what it needs (PostgreSQL; run as the role that owns the tables).

    Append-only tables (decisions, waivers, audit events, job files, …) get SELECT and INSERT, the others
    SELECT, INSERT, UPDATE and DELETE; never TRUNCATE, REFERENCES, TRIGGER nor ownership, so the
    application cannot disable the append-only triggers.
    """
    # lazy: CLI — `clgate --help` loads neither SQLAlchemy, FastAPI nor Celery
    from clgate.store import open_store
    from clgate.store.db import grant_app_role

    store = open_store(_settings(data_dir), sign=False)
    try:
        grant_app_role(store.engine, app_role)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        store.close()
    typer.echo(f"granted the application rights to {app_role}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("serve")(serve)
    app.command("worker")(worker)
    app.command("exporter")(exporter)
    app.add_typer(keys_app, name="keys")
    app.add_typer(db_app, name="db")

"""The record store shared by the workers and the API: SQL records, migrations, the artifact store, settings.

:func:`open_store` is the one way to open it (database engine, sessions, artifact folder for some settings).
Every query lives here, one module per record family — :mod:`~clgate.store.jobs`,
:mod:`~clgate.store.decisions`, :mod:`~clgate.store.policies`, :mod:`~clgate.store.keys`,
:mod:`~clgate.store.baselines`, :mod:`~clgate.store.audit`, :mod:`~clgate.store.uploads`,
:mod:`~clgate.store.stats` — with the project scope (:mod:`~clgate.store.scope`) beside them, and the
signed history of the records that decide verdicts and rights (:mod:`~clgate.store.history`, signed with
the key of :mod:`~clgate.store.signing`); the API, the
workers and the CLI call them and write no SQL of their own. A refused request is a
:class:`clgate.store.errors.RecordError`. Nothing here imports FastAPI or Celery.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from clgate.store.artifacts import ArtifactStore
    from clgate.store.settings import Settings
    from clgate.store.signing import Signer


@dataclass
class Store:
    """An open record store: settings, database engine, session factory and artifact store."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    artifacts: ArtifactStore
    signer: Signer | None = None  # signs the record history (clgate.store.history)

    def close(self) -> None:
        self.engine.dispose()


def open_store(settings: Settings, *, migrate: bool = False, sign: bool = True) -> Store:
    """Open the store for ``settings`` (creating the data folder; applying migrations when ``migrate``).

    Its sessions sign the record history with the key of :meth:`Settings.signing_key_path` (created, mode
    0600, when ``CLGATE_SIGNING_KEY_FILE`` is unset and ``<data_dir>/signing.key`` does not exist yet);
    a key file that is set but unreadable raises :class:`clgate.store.signing.SigningKeyError`. With
    ``sign=False`` (a verifier) nothing is created and the sessions sign nothing; ``Store.signer`` is
    still the key when its file exists.

    The data folder is private to the service's user: 0700 (whatever it held before), the SQLite
    database file 0600 (SQLite gives its ``-wal`` and ``-shm`` files the same mode), artifacts 0400.
    """
    # lazy: SQLAlchemy — importing clgate.store (for its settings) loads no database code until a store opens
    from clgate.store.artifacts import ArtifactStore
    from clgate.store.db import current_revision, head_revision, make_engine, make_sessionmaker, upgrade
    from clgate.store.signing import load_or_create

    private_dir(settings.data_dir)
    url = settings.resolved_database_url()
    _private_sqlite_file(url)
    engine = make_engine(
        url,
        pool_size=settings.db_pool_size,
        pool_timeout_s=settings.db_pool_timeout_s,
        busy_timeout_s=settings.db_busy_timeout_s,
    )
    if migrate:
        before = current_revision(engine)
        upgrade(url)
        if before != (head := head_revision()):  # the operator sees which process changed the schema
            logging.getLogger("clgate.store").warning(
                "migrated the record store from revision %s to %s", before or "(empty)", head
            )
    key_path = settings.signing_key_path()
    signer = (
        load_or_create(key_path, create=settings.signing_key_file is None)
        if sign or key_path.exists()
        else None
    )
    sessions = make_sessionmaker(engine, signer=signer if sign else None)
    store = Store(
        settings,
        engine,
        sessions,
        ArtifactStore(settings.artifact_dir, on_corrupt=_auditor(sessions)),
        signer,
    )
    if migrate and sign and signer is not None:
        # lazy: SQLAlchemy — importing clgate.store loads no database code until a store opens
        from clgate.store.history import seal

        seal(sessions, signer)  # records from before the signed history are sealed now, not at first write
    return store


def private_dir(path: Path) -> Path:
    """``path`` created if missing and made 0700 (only the service's user may list or enter it)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _private_sqlite_file(url: str) -> None:
    """The SQLite database file of ``url`` created (empty) as 0600 before SQLite opens it, or made 0600."""
    if not url.startswith("sqlite") or "///" not in url:
        return
    raw = url.split("///", 1)[1].split("?", 1)[0]
    if raw in ("", ":memory:"):
        return
    path = Path(raw)
    path.parent.mkdir(parents=True, exist_ok=True)
    # never open an existing database here: closing any descriptor of it would drop the POSIX locks
    # that this process's SQLite connections hold on it
    if not path.exists():
        with contextlib.suppress(FileExistsError):  # another process created it meanwhile
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    os.chmod(path, 0o600)


def _auditor(sessions: sessionmaker[Session]):
    """``on_corrupt`` for the artifact store: each quarantined file leaves an ``artifact.quarantined``
    event."""
    # lazy: SQLAlchemy — importing clgate.store (for its settings) loads no database code until a store opens
    from clgate.store.db import audit, session_scope

    def record(corruption) -> None:
        with session_scope(sessions) as s:
            audit(
                s,
                "system:store",
                "artifact.quarantined",
                "artifact",
                corruption.expected,
                actual_sha256=corruption.actual,
                quarantined_as=corruption.quarantined_as,
            )

    return record


_shared: dict[str, Store] = {}
_shared_lock = threading.Lock()


def shared_store(settings: Settings) -> Store:
    """This process's store for ``settings``, opened once (workers run many jobs on one connection pool)."""
    key = settings.model_dump_json()
    with _shared_lock:
        store = _shared.get(key)
        if store is None:
            store = _shared[key] = open_store(settings)
        return store


def reset_after_fork() -> None:
    """In a forked process: drop the parent's pooled connections (never shared across a fork)."""
    with _shared_lock:
        for store in _shared.values():
            store.engine.dispose(close=False)
        _shared.clear()

"""Operator mistakes are not clgate bugs: a database, job broker or data folder that cannot be reached or
used ends the command with exit status 2 and one line naming the setting and the host, e.g.

    error: CLGATE_DATABASE_URL (postgresql+psycopg://app:***@db:5432/clgate): the database is unavailable …

Called from the command line's last-resort handler (:func:`clgate.cli.main`) before it calls an exception
a bug; the classification itself is :func:`clgate.store.db.as_settings_error`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _data_dir(argv: list[str]) -> Path:
    """The data folder the command used: ``--data-dir`` if given, else $CLGATE_DATA_DIR, else the default."""
    for i, arg in enumerate(argv):
        if arg == "--data-dir" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--data-dir="):
            return Path(arg.split("=", 1)[1])
    return Path(os.environ.get("CLGATE_DATA_DIR") or "clgate-data")


def settings_error_message(exc: BaseException, argv: list[str] | None = None) -> str | None:
    """``"SETTING (host): reason"`` when ``exc`` is an unreachable or unusable store, else ``None``.

    Only looks when the record store was loaded (a service command ran): the base install has no
    SQLAlchemy, and its commands have no such settings."""
    if "clgate.store.db" not in sys.modules:
        return None
    # lazy: SQLAlchemy — the base install has no store; only a failing command gets here
    from clgate.store.db import as_settings_error

    found = as_settings_error(
        exc,
        database_url=os.environ.get("CLGATE_DATABASE_URL")
        or f"sqlite:///{_data_dir(argv if argv is not None else sys.argv) / 'clgate.db'}",
        broker_url=os.environ.get("CLGATE_BROKER_URL"),
        data_dir=_data_dir(argv if argv is not None else sys.argv),
    )
    return None if found is None else str(found)

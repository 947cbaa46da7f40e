"""The data folder is the service's user's alone: the folder 0700 (even one made earlier with a looser
mode), the SQLite database 0600, stored artifacts 0400 — other local users read nothing."""

from __future__ import annotations

import asyncio
import os
import stat

from clgate.store import open_store
from clgate.store.settings import Settings


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def _chunks():
    yield b"secret model bytes"


def test_the_data_folder_database_and_artifacts_are_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    store = open_store(Settings(data_dir=data), migrate=True)
    try:
        stored = asyncio.run(store.artifacts.put_stream(_chunks(), max_bytes=1 << 20))
        assert _mode(data) == 0o700
        db = data / "clgate.db"
        assert db.is_file() and _mode(db) == 0o600
        for extra in (data / "clgate.db-wal", data / "clgate.db-shm"):
            if extra.exists():
                assert _mode(extra) & 0o077 == 0, extra
        assert _mode(store.artifacts.path(stored.sha256)) == 0o400
        for folder in store.artifacts.path(stored.sha256).parents:
            if folder == data:
                break
            assert _mode(folder) & 0o077 == 0, folder
    finally:
        store.close()

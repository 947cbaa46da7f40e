"""A pool process forked while the worker's heartbeat writes can still write to the SQLite store.

Celery's prefork pool forks a replacement child whenever one dies, at any moment of the main process's
heartbeat thread. SQLite keeps its lock bookkeeping per process: a child forked inside the heartbeat's
write transaction inherits it without the lock, and every write of that child then fails with
"database is locked" (seen as a job retried until it timed out in the worker-crash fault test). The
heartbeat holds a guard that the process takes before it forks.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from sqlalchemy import text

from clgate.store import jobs as records
from clgate.store import reset_after_fork
from clgate.store.db import session_scope, upgrade
from clgate.store.settings import Settings
from clgate.workers import runner

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")


def _slow_beat(store, hostname, queues):
    """A heartbeat whose write transaction stays open a while (a busy machine)."""
    with session_scope(store.sessions) as s:
        s.execute(text("DELETE FROM worker_heartbeats WHERE hostname = 'nobody'"))  # takes the write lock
        time.sleep(0.05)


def _child_writes(settings: Settings) -> int:
    reset_after_fork()  # what the pool's worker_process_init does
    try:
        records.beat(runner.store_for(settings), f"child-{os.getpid()}", "cpu")
    except Exception as exc:
        print(f"child {os.getpid()}: {exc}", file=sys.stderr)
        return 1
    return 0


def test_children_forked_during_heartbeats_can_write(tmp_path, monkeypatch):
    settings = Settings(data_dir=tmp_path / "data", worker_heartbeat_s=0.03, db_busy_timeout_s=2)
    settings.data_dir.mkdir()
    upgrade(settings.resolved_database_url())
    store = runner.store_for(settings)
    monkeypatch.setattr(records, "beat", _slow_beat)
    heartbeat = runner.Heartbeat(store, "main", "cpu").start()
    monkeypatch.setattr(records, "forget", lambda *a, **k: None)
    failed = 0
    try:
        time.sleep(0.1)
        # the heartbeat is inside a write transaction most of the time: without the guard, most forks
        # land in one
        for _ in range(20):
            pid = os.fork()
            if pid == 0:
                os._exit(_child_writes(settings))
            _, status = os.waitpid(pid, 0)
            failed += os.waitstatus_to_exitcode(status) != 0
            time.sleep(0.013)
    finally:
        heartbeat.stop()
    assert failed == 0, f"{failed} of 20 children forked during heartbeats could not write"

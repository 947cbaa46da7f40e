"""The embedded executor: jobs run in a background process pool of the API process, no broker needed.

Same task code as the Celery workers (:func:`clgate.workers.runner.execute_job`); the pool uses ``spawn``
processes so that training never holds the API's event loop or its GIL. On start it takes back the
jobs a previous run left queued or running (the task is idempotent). Transient faults are retried with
the same policy as the Celery task (:data:`clgate.workers.runner.MAX_RETRIES`).
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import logging
import multiprocessing
import os
import socket
import threading
import time

from clgate.store import jobs as records
from clgate.store.settings import Settings
from clgate.workers import pool, runner
from clgate.workers.supervisor import Supervisor

log = logging.getLogger("clgate.embedded")


def _watch_parent(parent_pid: int) -> None:
    """Exit when the API process is gone (a running job resumes at the next start)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="clgate-parent-watch", daemon=True).start()


def _init_process(parent_pid: int, settings_json: str) -> None:
    """Pool process initializer: watch the API process; with ``CLGATE_SANDBOX_POOL`` > 0 start this
    process's waiting job children (:mod:`clgate.workers.pool`) and load the engine (torch) now, so
    that a job starts at once."""
    _watch_parent(parent_pid)
    if pool.start(Settings.model_validate_json(settings_json)) is None:
        return
    atexit.register(pool.stop)
    with contextlib.suppress(ImportError):  # no engine extra: metrics-only jobs still run
        # lazy: torch — loaded here, before the first job, in the process that will run it
        import clgate.engine.runner  # noqa: F401


def _ready() -> None:
    """A no-op task that makes the pool start a process (and run its initializer) before any job."""


def _child(job_id: str, settings_json: str) -> str:
    settings = Settings.model_validate_json(settings_json)
    for retry in range(runner.MAX_RETRIES + 1):
        try:
            return runner.execute_job(job_id, settings, actor=f"embedded:{socket.gethostname()}")
        except runner.TRANSIENT:
            if retry == runner.MAX_RETRIES:
                raise
            time.sleep(runner.retry_delay(retry))
    raise AssertionError("unreachable")


class EmbeddedExecutor:
    """Runs jobs in a process pool beside the API, with the same supervisor as Celery mode.

    A job whose process dies (out of memory, killed) is left ``running``; its heartbeats stop and the
    supervisor queues it again after ``CLGATE_WORKER_STALE_S`` (or fails it after
    ``CLGATE_MAX_WORKER_LOSSES`` losses); past the hard time limit it is failed and its process ends.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._settings_json = settings.model_dump_json()
        self._lock = threading.Lock()
        self._pool: cf.ProcessPoolExecutor | None = None
        self._heartbeat: runner.Heartbeat | None = None
        self._supervisor: Supervisor | None = None
        self._held: set[str] = set()
        self.hostname = f"embedded@{socket.gethostname()}"

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        executor = cf.ProcessPoolExecutor(
            max_workers=self.settings.embedded_workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_process,
            initargs=(os.getpid(), self._settings_json),
        )
        for _ in range(self.settings.embedded_workers if self.settings.sandbox_pool else 0):
            executor.submit(_ready)  # with waiting children: its processes start now, not at the first job
        return executor

    def start(self) -> None:
        with self._lock:
            self._pool = self._new_pool()
        store = runner.store_for(self.settings)
        self._heartbeat = runner.Heartbeat(store, self.hostname, "cpu,gpu").start()
        self._supervisor = Supervisor(
            store,
            send=lambda job_id, queue: self.submit(job_id, queue=queue),
            held=self.held_ids,
            actor=f"system:{self.hostname}",
        )
        # nothing runs a job of this executor before it starts: every running job lost its process
        self._supervisor.run_once(assume_lost=True)
        for job_id, _queue in records.queued_jobs(store, older_than_s=0):
            if job_id not in self._held:
                log.info("resuming job %s left over by a previous run", job_id)
                self.submit(job_id, queue="")
        self._supervisor.start()

    def held_ids(self) -> set[str]:
        """Jobs submitted to the pool and not yet finished (the supervisor re-sends queued jobs not in it)."""
        with self._lock:
            return set(self._held)

    def submit(self, job_id: str, *, queue: str) -> None:
        with self._lock:
            if self._pool is None:
                raise RuntimeError("the embedded executor is not running")
            try:
                future = self._pool.submit(_child, job_id, self._settings_json)
            except cf.BrokenExecutor:
                self._pool = self._new_pool()
                future = self._pool.submit(_child, job_id, self._settings_json)
            self._held.add(job_id)
        future.add_done_callback(lambda f: self._done(job_id, f))

    def _done(self, job_id: str, future: cf.Future) -> None:
        with self._lock:
            self._held.discard(job_id)
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            return
        log.error("job %s: %s", job_id, exc)
        if isinstance(exc, cf.BrokenExecutor):
            # the process died (out of memory, killed, ended past its time limit): a fresh pool for the
            # next jobs; the supervisor queues this one again once its heartbeats are stale, or fails it
            with self._lock:
                if self._pool is not None:
                    self._pool = self._new_pool()

    def shutdown(self) -> None:
        if self._supervisor is not None:
            self._supervisor.stop()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            # a running job is not waited for (it may train for hours): its process is stopped, the job
            # stays "running" and is resumed when the executor starts again (the task is idempotent)
            processes = list(getattr(pool, "_processes", {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(timeout=10)

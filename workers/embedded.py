"""The embedded executor: jobs run in a background process pool of the API process, no broker needed.

Same task code as the Celery workers (:func:`clgate.workers.runner.execute_job`); the pool uses ``spawn``
processes so that training never holds the API's event loop or its GIL. On start it takes back the
jobs a previous run left queued or running (the task is idempotent). Transient faults are retried with
the same policy as the Celery task (:data:`clgate.workers.runner.MAX_RETRIES`).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import os
import socket
import threading
import time

from clgate.store import jobs as records
from clgate.store.models import JobState
from clgate.store.settings import Settings
from clgate.workers import runner

log = logging.getLogger("clgate.embedded")

# A job whose process dies this many times (out of memory, killed) is failed instead of run again.
MAX_PROCESS_DEATHS = 3


def _watch_parent(parent_pid: int) -> None:
    """Pool process initializer: exit when the API process is gone (a running job resumes at the next start)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="clgate-parent-watch", daemon=True).start()


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
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._settings_json = settings.model_dump_json()
        self._lock = threading.Lock()
        self._pool: cf.ProcessPoolExecutor | None = None
        self._heartbeat: runner.Heartbeat | None = None
        self.hostname = f"embedded@{socket.gethostname()}"

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(
            max_workers=self.settings.embedded_workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_watch_parent, initargs=(os.getpid(),),
        )

    def start(self) -> None:
        with self._lock:
            self._pool = self._new_pool()
        store = runner.store_for(self.settings)
        self._heartbeat = runner.Heartbeat(store, self.hostname, "cpu,gpu").start()
        for job_id in records.pending_jobs(store):
            log.info("resuming job %s left over by a previous run", job_id)
            self.submit(job_id, queue="")

    def submit(self, job_id: str, *, queue: str) -> None:
        with self._lock:
            if self._pool is None:
                raise RuntimeError("the embedded executor is not running")
            try:
                future = self._pool.submit(_child, job_id, self._settings_json)
            except cf.BrokenExecutor:
                self._pool = self._new_pool()
                future = self._pool.submit(_child, job_id, self._settings_json)
        future.add_done_callback(lambda f, job_id=job_id: self._done(job_id, f))

    def _done(self, job_id: str, future: cf.Future) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None:
            return
        log.error("job %s: %s", job_id, exc)
        if isinstance(exc, cf.BrokenExecutor):
            # the child died (out of memory, killed): run the job again in a fresh pool, like a redelivery
            with self._lock:
                if self._pool is not None:
                    self._pool = self._new_pool()
            self._fail_if_repeated(job_id)

    def _fail_if_repeated(self, job_id: str) -> None:
        store = runner.store_for(self.settings)
        if records.attempts(store, job_id) < MAX_PROCESS_DEATHS:
            self.submit(job_id, queue="")
        else:
            error = f"the job's process died {MAX_PROCESS_DEATHS} times"
            records.finish(store, job_id, JobState.failed, error=error, actor=self.hostname)

    def shutdown(self) -> None:
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

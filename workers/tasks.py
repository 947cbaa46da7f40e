"""Celery tasks: thin wrappers over :func:`clgate.workers.runner.execute_job` (retries on named transient
faults)."""

from __future__ import annotations

import contextlib
import logging
import threading

from celery import signals

from clgate.store import reset_after_fork
from clgate.store.db import wait_for_schema
from clgate.workers import pool, runner
from clgate.workers.app import TASK_NAME, app
from clgate.workers.sandbox import warn_if_unconfined

log = logging.getLogger("clgate.worker")


@app.task(
    name=TASK_NAME,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=runner.TRANSIENT,
    retry_backoff=True,
    retry_backoff_max=runner.RETRY_BACKOFF_MAX_S,
    retry_jitter=True,
    max_retries=runner.MAX_RETRIES,
)
def run_job(self, job_id: str) -> str:
    """Run job ``job_id`` (all its inputs are in the store); idempotent, so redelivery is safe."""
    return runner.execute_job(job_id, actor=f"worker:{self.request.hostname or runner.worker_name()}")


_heartbeat: runner.Heartbeat | None = None


@signals.worker_ready.connect
def _start_heartbeat(sender=None, **_: object) -> None:
    """Record this worker and its queues in the store every few seconds (``clgate_workers`` gauge)."""
    global _heartbeat

    store = runner.store_for()
    wait_for_schema(store.engine)
    # the sender is the worker's consumer: its hostname and the queues it consumes
    queues = ",".join(sorted(q.name for q in sender.app.amqp.queues.consume_from.values()))
    _heartbeat = runner.Heartbeat(store, sender.hostname, queues or "gpu,cpu").start()


@signals.worker_ready.connect
def _check_sandbox(**_: object) -> None:
    """Say at start, loudly when it is not bwrap, how this worker confines submitted models."""
    warn_if_unconfined(runner.store_for().settings)


@signals.worker_process_init.connect
def _fresh_connections(**_: object) -> None:
    """Each pool process opens its own database connections (a replacement child is forked after start)."""
    reset_after_fork()


@signals.worker_process_init.connect
def _start_sandbox_pool(**_: object) -> None:
    """Each pool process keeps its waiting job children (:mod:`clgate.workers.pool`) and loads the engine
    in the background (the process must answer Celery within seconds)."""
    pool.start(runner.store_for().settings)
    threading.Thread(target=_load_engine, name="clgate-engine-import", daemon=True).start()


def _load_engine() -> None:
    with contextlib.suppress(ImportError):  # no engine extra: metrics-only jobs still run
        # lazy: torch — loaded before the first job, off the thread that answers Celery
        import clgate.engine.runner  # noqa: F401


@signals.worker_process_shutdown.connect
def _stop_sandbox_pool(**_: object) -> None:
    pool.stop()


@signals.worker_shutdown.connect
def _stop_heartbeat(**_: object) -> None:
    if _heartbeat is not None:
        _heartbeat.stop()

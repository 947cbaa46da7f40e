"""The Celery application: Redis broker from ``CLGATE_BROKER_URL``, queues ``gpu`` and ``cpu``.

``celery -A clgate.workers.app worker -Q gpu`` (or ``clgate worker --queues gpu``) starts a worker. The
configuration is read from the settings when the app is first configured, not at import.

Delivery guarantees: ``acks_late`` + ``reject_on_worker_lost`` (a job whose worker dies is delivered
again), prefetch 1 (a worker holds one job at a time), and a Redis visibility timeout longer than the
hard time limit (so that a long job is not redelivered while it still runs). Redelivery is harmless:
the task is idempotent by job id (:func:`clgate.workers.runner.execute_job`).
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from clgate.schemas.vocab import QUEUES
from clgate.store.settings import load_settings

TASK_NAME = "clgate.run_job"

app = Celery("clgate", include=["clgate.workers.tasks"])


def celery_config(settings) -> dict:
    return {
        "broker_url": settings.broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": settings.job_time_limit_s + 600},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_queues": [Queue(name) for name in QUEUES],
        "task_default_queue": "cpu",
        "task_soft_time_limit": settings.job_soft_time_limit_s,
        "task_time_limit": settings.job_time_limit_s,
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
    }


def producer(settings) -> Celery:
    """A Celery app that only sends jobs, configured from ``settings`` (the API's, not the environment)."""
    sender = Celery("clgate-api", set_as_current=False)
    sender.conf.update(celery_config(settings))
    return sender


@app.on_configure.connect
def _configure(sender: Celery, **_: object) -> None:
    settings = load_settings()
    if settings.broker_url is None:
        raise RuntimeError("CLGATE_BROKER_URL is not set: Celery workers need a redis:// broker")
    sender.conf.update(celery_config(settings))

"""The supervisor: no job is stranded by a lost worker, a hard time limit or a broker that forgot it.

One background thread per executor (the embedded executor's, or the API's in Celery mode), every
``CLGATE_REAPER_INTERVAL_S`` and once at start:

* **reaper** (:func:`clgate.store.jobs.reap`): a running job past the hard time limit is failed with that
  reason; one whose worker stopped heartbeating for ``CLGATE_WORKER_STALE_S`` is queued again and sent,
  or failed once it has lost ``CLGATE_MAX_WORKER_LOSSES`` workers ("crashed the worker 3 times");
* **reconciler**: a job recorded as queued for longer than ``CLGATE_REQUEUE_GRACE_S`` that the executor
  or broker does not hold (Redis restarted without persistence, a send that never arrived) is sent again.

Sending twice is harmless: a delivery claims the job only while it is queued or its worker is silent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from clgate.store import Store
from clgate.store import jobs as records

log = logging.getLogger("clgate.supervisor")


@dataclass
class Pass:
    """What one supervisor pass did."""

    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)


class Supervisor:
    """Reaps and reconciles for one executor.

    ``send(job_id, queue)`` hands a job to the executor or broker; ``held()`` returns the ids of jobs the
    executor or broker holds now (queued or delivered, not yet acknowledged), or ``None`` when it cannot
    tell (broker unreachable: nothing is re-sent then).
    """

    def __init__(
        self,
        store: Store,
        *,
        send: Callable[[str, str], None],
        held: Callable[[], set[str] | None],
        actor: str,
    ) -> None:
        self.store, self.send, self.held, self.actor = store, send, held, actor
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="clgate-supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.warning("supervisor pass failed", exc_info=True)
            self._stop.wait(self.store.settings.reaper_interval_s)

    def run_once(self, *, assume_lost: bool = False) -> Pass:
        """One pass: reap running jobs, then re-send queued jobs nobody holds."""
        done = Pass()
        reaped = records.reap(self.store, actor=self.actor, assume_lost=assume_lost)
        for job_id, reason, _worker in reaped.failed:
            log.error("job %s failed: %s", job_id, reason)
            done.failed.append(job_id)
        for job_id, queue in reaped.requeued:
            log.warning("job %s lost its worker: queued again", job_id)
            self._send(job_id, queue)
            done.requeued.append(job_id)
        queued = records.queued_jobs(self.store, older_than_s=self.store.settings.requeue_grace_s)
        if queued:
            held = self.held()
            if held is not None:
                for job_id, queue in queued:
                    if job_id not in held and job_id not in done.requeued:
                        log.warning(
                            "job %s is queued but not held by the broker or executor: sent again", job_id
                        )
                        self._send(job_id, queue)
                        done.resent.append(job_id)
        return done

    def _send(self, job_id: str, queue: str) -> None:
        try:
            self.send(job_id, queue)
        except Exception:
            log.warning("could not send job %s", job_id, exc_info=True)

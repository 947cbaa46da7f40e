"""Where submitted jobs go: the embedded executor (no broker) or Celery workers through Redis."""

from __future__ import annotations

from typing import Protocol

from clgate.schemas.vocab import QUEUES
from clgate.store import open_store, stats
from clgate.store.settings import Settings
from clgate.workers.embedded import EmbeddedExecutor
from clgate.workers.supervisor import Supervisor


class Dispatcher(Protocol):
    kind: str

    def start(self) -> None: ...
    def submit(self, job_id: str, queue: str) -> None: ...
    def ready(self) -> tuple[bool, str]: ...
    def queue_lengths(self) -> dict[str, int]: ...
    def close(self) -> None: ...


class EmbeddedDispatcher:
    """Jobs run in the API process's background pool (same task code as the workers)."""

    kind = "embedded"

    def __init__(self, settings: Settings, sessions) -> None:
        self.sessions = sessions
        self.executor = EmbeddedExecutor(settings)

    def start(self) -> None:
        self.executor.start()

    def submit(self, job_id: str, queue: str) -> None:
        self.executor.submit(job_id, queue=queue)

    def ready(self) -> tuple[bool, str]:
        return True, "embedded executor"

    def queue_lengths(self) -> dict[str, int]:
        with self.sessions() as s:
            rows = stats.queued_counts(s)
        return {q: int(rows.get(q, 0)) for q in QUEUES}

    def close(self) -> None:
        self.executor.shutdown()


class CeleryDispatcher:
    """Jobs go to the ``gpu``/``cpu`` queues on Redis; the Celery task id is the job id."""

    kind = "celery"

    def __init__(self, settings: Settings) -> None:
        import redis

        if settings.broker_url is None:
            raise ValueError("the Celery dispatcher needs CLGATE_BROKER_URL")
        self.settings = settings
        self.redis = redis.Redis.from_url(settings.broker_url, socket_timeout=2, socket_connect_timeout=2)

    def start(self) -> None:
        # lazy: Celery — only this dispatcher loads the Celery app; the embedded one runs without it
        from clgate.workers.app import producer

        self.celery = producer(self.settings)  # this API's own app, configured from its settings
        # the supervisor gets its own small store: its queries never wait on the requests' pool
        self._store = open_store(self.settings.model_copy(update={"api_concurrency": 1}))
        self.supervisor = Supervisor(
            self._store, send=self.submit, held=self.held_ids, actor="system:supervisor"
        ).start()

    def held_ids(self) -> set[str] | None:
        """Ids of the jobs Redis holds: waiting in a queue (any priority) or delivered and not
        acknowledged."""
        import json

        try:
            keys = [
                k
                for q in QUEUES
                for k in self.redis.scan_iter(match=f"{q}*", count=1000)
                if k.decode(errors="replace").split("\x06\x16", 1)[0] in QUEUES
            ]
            raw = [m for k in keys for m in self.redis.lrange(k, 0, -1)]
            raw += [json.dumps(json.loads(v)[0]).encode() for v in self.redis.hvals("unacked")]
        except Exception:
            return None
        ids: set[str] = set()
        for message in raw:
            try:
                task_id = json.loads(message).get("headers", {}).get("id")
            except (ValueError, AttributeError):
                continue
            if task_id:
                ids.add(str(task_id))
        return ids

    def submit(self, job_id: str, queue: str) -> None:
        # lazy: Celery — only this dispatcher loads the Celery app; the embedded one runs without it
        from clgate.workers.app import TASK_NAME

        self.celery.send_task(
            TASK_NAME,
            args=[job_id],
            queue=queue,
            task_id=job_id,
            retry=True,
            retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5},
        )

    def ready(self) -> tuple[bool, str]:
        try:
            self.redis.ping()
        except Exception as exc:
            return False, f"broker unreachable: {type(exc).__name__}"
        return True, "broker ok"

    def queue_lengths(self) -> dict[str, int]:
        pipe = self.redis.pipeline()
        for q in QUEUES:
            pipe.llen(q)
        return {q: int(n) for q, n in zip(QUEUES, pipe.execute(), strict=True)}

    def close(self) -> None:
        if getattr(self, "supervisor", None) is not None:
            self.supervisor.stop()
            self._store.close()
        self.redis.close()
        if getattr(self, "celery", None) is not None:
            self.celery.close()


def make_dispatcher(settings: Settings, sessions) -> Dispatcher:
    return EmbeddedDispatcher(settings, sessions) if settings.embedded else CeleryDispatcher(settings)

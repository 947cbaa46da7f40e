"""Service settings: ``CLGATE_*`` environment variables, validated once at start-up.

Nothing here is built at import time; the API obtains the settings through a dependency
(:func:`clgate.service.deps.get_settings`) and the workers through :func:`load_settings`.

>>> s = Settings(data_dir="/tmp/clgate-doc")
>>> s.resolved_database_url()
'sqlite:////tmp/clgate-doc/clgate.db'
>>> s.embedded
True
>>> Settings(broker_url="amqp://x")
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for Settings
broker_url
  Value error, CLGATE_BROKER_URL must be a redis:// or rediss:// URL (got scheme 'amqp') ...
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024


class Settings(BaseSettings):
    """Everything the API and the workers read from the environment (prefix ``CLGATE_``)."""

    model_config = SettingsConfigDict(env_prefix="CLGATE_", extra="ignore")

    data_dir: Path = Field(
        Path("clgate-data"),
        description="Artifact store, job work folders and (by default) the SQLite database.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL; default sqlite:///<data_dir>/clgate.db. PostgreSQL: postgresql+psycopg://…",
    )
    broker_url: str | None = Field(
        None,
        description="redis://host:port/db → jobs go to Celery workers; unset → embedded in-process executor.",
    )
    max_upload_bytes: Annotated[int, Field(gt=0)] = 512 * MiB
    embedded_workers: Annotated[int, Field(ge=1, le=64)] = 1
    job_soft_time_limit_s: Annotated[int, Field(gt=0)] = 6 * 3600
    job_time_limit_s: Annotated[int, Field(gt=0)] = 6 * 3600 + 300
    auto_migrate: bool = Field(True, description="Apply Alembic migrations when the API starts.")
    bootstrap_admin_key: str | None = Field(
        None, description="If set and no key exists yet, this key is stored as the first admin key."
    )
    worker_heartbeat_s: Annotated[float, Field(gt=0)] = 15.0
    worker_stale_s: Annotated[float, Field(gt=0)] = 60.0
    worst_classes: Annotated[int, Field(ge=1, le=20)] = 3
    sandbox: Literal["auto", "bwrap", "none"] = Field(
        "auto",
        description=(
            "How a job's engine child is confined: bwrap (bubblewrap), none, or auto (bwrap when it works)."
        ),
    )
    allow_unconfined: bool = Field(
        False, description="Run submitted models without a sandbox when none is available (not recommended)."
    )
    sandbox_kill_grace_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        10.0,
        description="After a cancel or time limit, seconds a job's child gets to stop before it is killed.",
    )
    sandbox_memory_bytes: Annotated[int, Field(ge=0)] = Field(
        8 * 1024 * MiB,
        description="Address-space limit of a job's child (RLIMIT_AS; RLIMIT_DATA on GPU); 0: none.",
    )
    sandbox_max_file_bytes: Annotated[int, Field(gt=0)] = Field(
        256 * MiB,
        description="Largest file a job's child may write (RLIMIT_FSIZE; its standard error included), "
        "largest message header it may send and largest evaluation log built from its messages.",
    )
    sandbox_cpu_threads: Annotated[int, Field(ge=1, le=256)] = Field(
        4, description="Most CPU threads a job's child uses (torch, OpenMP, MKL, OpenBLAS)."
    )
    sandbox_pool: Annotated[int, Field(ge=0, le=16)] = Field(
        1,
        description="Job children each worker process keeps started, confined and waiting (0: each job "
        "starts its own).",
    )
    public_docs: bool = Field(
        False,
        description="Serve /docs, /redoc and /openapi.json without a key. Off: /openapi.json needs "
        "a viewer key and the interactive pages are not served (the API's shape is not public by default).",
    )
    signing_key_file: Path | None = Field(
        None,
        description="Ed25519 private key (PEM) that signs the record history; a secret file the database "
        "never holds. Unset: <data_dir>/signing.key, created (mode 0600) on first start.",
    )
    # ------------------------------------------------------------ reliability (load and faults)
    api_concurrency: Annotated[int, Field(ge=1, le=1024)] = Field(
        32,
        description="Requests handled at once; more wait in the event loop holding no thread nor connection. "
        "The database pool and the thread pool are sized from it, so a request never waits for one while "
        "holding the other.",
    )
    api_write_concurrency: Annotated[int, Field(ge=1, le=1024)] | None = Field(
        None,
        description="Writing requests (POST, PUT, PATCH, DELETE; uploads excepted) handled at once per API "
        "process; more wait in the event loop, first come first served. Unset: 2 on SQLite (one writer at a "
        "time: more only wait on its lock, unfairly, until its busy timeout), CLGATE_API_CONCURRENCY "
        "otherwise.",
    )
    api_processes: Annotated[int, Field(ge=1, le=256)] = Field(
        1,
        description="API processes serving one address (`clgate serve --workers` sets it). With more than "
        "one, /metrics leaves out the process_* series: they would describe whichever process answered.",
    )
    db_pool_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    orphan_upload_age_s: Annotated[float, Field(ge=0)] = Field(
        3600.0,
        description="At start the API deletes temporary upload files untouched for this long.",
    )
    max_json_bytes: Annotated[int, Field(gt=0)] = Field(
        1 * MiB, description="Largest JSON request body (413)."
    )
    max_json_depth: Annotated[int, Field(ge=2, le=200)] = Field(32, description="Deepest JSON nesting (422).")
    max_npz_bytes: Annotated[int, Field(gt=0)] = Field(
        2048 * MiB,
        description="Largest decompressed size of an NPZ data set, checked before loading it (422).",
    )
    max_samples: Annotated[int, Field(gt=0)] = Field(
        5_000_000,
        description="Most samples (rows) in one array of a data set, checked before loading it (422).",
    )
    db_busy_timeout_s: Annotated[float, Field(gt=0, le=300)] = Field(
        5.0,
        description="How long a statement waits for a locked database (SQLite) before the request gets 503.",
    )
    max_worker_losses: Annotated[int, Field(ge=1, le=100)] = Field(
        3,
        description="A job whose worker crashed or went silent this many times is failed, not run again.",
    )
    reaper_interval_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        10.0,
        description="How often the API re-queues jobs of silent workers, fails jobs past the hard time "
        "limit and re-sends queued jobs the broker no longer holds.",
    )
    requeue_grace_s: Annotated[float, Field(ge=0, le=3600)] = Field(
        30.0,
        description="A queued job younger than this is never re-sent by the reconciler (in flight).",
    )
    webhook_interval_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        1.0, description="How often the API sends due webhook deliveries."
    )
    webhook_backoff_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        5.0, description="Wait before the first retry of a failed webhook delivery; doubles at each retry."
    )
    webhook_max_attempts: Annotated[int, Field(ge=1, le=50)] = Field(
        10, description="Attempts of one webhook delivery before it is marked failed."
    )
    webhook_timeout_s: Annotated[float, Field(gt=0, le=300)] = Field(
        10.0, description="Seconds a webhook receiver has to answer one attempt."
    )

    @field_validator("broker_url")
    @classmethod
    def _broker_scheme(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in {"redis", "rediss"}:
            raise ValueError(f"CLGATE_BROKER_URL must be a redis:// or rediss:// URL (got scheme {scheme!r})")
        return value

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        scheme = value.split("://", 1)[0].split("+", 1)[0] if "://" in value else ""
        if scheme not in {"sqlite", "postgresql"}:
            raise ValueError(
                f"CLGATE_DATABASE_URL must be sqlite:// or postgresql:// (got scheme {scheme!r})"
            )
        return value

    @field_validator("bootstrap_admin_key")
    @classmethod
    def _key_format(cls, value: str | None) -> str | None:
        if value in (None, ""):
            return None
        if not re.fullmatch(r"clg_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", value):
            raise ValueError(
                "must look like clg_<16 hex>_<43 url-safe characters> (make one with `clgate keys create`)"
            )
        return value

    @field_validator("job_time_limit_s")
    @classmethod
    def _hard_after_soft(cls, value: int, info) -> int:
        soft = info.data.get("job_soft_time_limit_s")
        if soft is not None and value <= soft:
            raise ValueError(f"must exceed CLGATE_JOB_SOFT_TIME_LIMIT_S ({soft}) so a job can stop cleanly")
        return value

    @property
    def db_pool_size(self) -> int:
        """Connections per API process: one per admitted request plus the background threads' few."""
        return self.api_concurrency + 8

    @property
    def write_concurrency(self) -> int:
        """Writing requests handled at once per API process (:attr:`api_write_concurrency` resolved)."""
        if self.api_write_concurrency is not None:
            return min(self.api_write_concurrency, self.api_concurrency)
        return 2 if self.resolved_database_url().startswith("sqlite") else self.api_concurrency

    @property
    def embedded(self) -> bool:
        """No broker configured: jobs run in the API process's background executor."""
        return self.broker_url is None

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir.resolve() / 'clgate.db'}"

    def signing_key_path(self) -> Path:
        """Where the history's signing key is: ``CLGATE_SIGNING_KEY_FILE`` or ``<data_dir>/signing.key``."""
        return self.signing_key_file or self.data_dir / "signing.key"

    @property
    def artifact_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "jobs"


def load_settings(**overrides) -> Settings:
    """Read and validate the environment (raises ``pydantic.ValidationError`` naming the variable)."""
    return Settings(**overrides)

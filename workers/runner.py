"""The job task's code, shared by the Celery task and the embedded executor.

``execute_job(job_id)`` loads the job from the store, runs it (engine → logs, or uploaded logs, or a
finished job's logs for a re-gate), gates the logs, stores result files and the decision, and records
state, progress and audit events. It is idempotent: a job already finished, or one that already has
its decision, is not run again, and the unique key on ``decisions.job_id`` makes a second decision
impossible even for two deliveries racing. Bad input fails the job with a reason; only the named
transient faults (:data:`TRANSIENT`) escape, for the caller to retry.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.exceptions
import sqlalchemy.exc
from sqlalchemy import exists, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from clgate.store.settings import Settings, load_settings
from clgate.store.artifacts import ArtifactStore
from clgate.store.db import audit, make_engine, make_sessionmaker, session_scope
from clgate.store.models import (
    Artifact,
    Decision,
    Job,
    JobFile,
    JobState,
    Policy,
    WorkerHeartbeat,
    as_utc,
    utcnow,
)
from clgate.workers import core
from clgate.workers.specs import check_paths, find_refs, resolve_refs

log = logging.getLogger("clgate.worker")


class TransientJobError(RuntimeError):
    """An infrastructure fault worth retrying (storage briefly unavailable …)."""


TRANSIENT: tuple[type[BaseException], ...] = (
    TransientJobError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)

RESULT_FILES = ("decision.json", "metrics.json", "report.html", "report.md", "fmeca.csv", "junit.xml")


@dataclass
class Context:
    settings: Settings
    sessions: sessionmaker[Session]
    store: ArtifactStore


_contexts: dict[str, Context] = {}
_contexts_lock = threading.Lock()


def context(settings: Settings | None = None) -> Context:
    """Per-process database engine and store for these settings (created once)."""
    settings = settings or load_settings()
    key = settings.model_dump_json()
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            engine = make_engine(settings.resolved_database_url())
            ctx = Context(settings, make_sessionmaker(engine), ArtifactStore(settings.artifact_dir))
            _contexts[key] = ctx
        return ctx


def reset_after_fork() -> None:
    """In a forked worker process: drop the parent's pooled connections (never shared across a fork)."""
    with _contexts_lock:
        for ctx in _contexts.values():
            ctx.sessions.kw["bind"].dispose(close=False)
        _contexts.clear()


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _finish(s: Session, job: Job, state: JobState, *, error: str | None, actor: str) -> None:
    now = utcnow()
    job.state = state.value
    job.finished_at = now
    job.error = error
    started = as_utc(job.started_at)
    job.duration_s = (now - started).total_seconds() if started else None
    audit(s, actor, f"job.{state.value}", "job", job.id, error=error, attempt=job.attempts)


class _Throttle:
    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            return True
        return False


def execute_job(job_id: str, settings: Settings | None = None, *, actor: str | None = None) -> str:
    """Run one job to a terminal state; returns that state. Raises only :data:`TRANSIENT` faults."""
    ctx = context(settings)
    actor = actor or f"worker:{worker_name()}"
    # claim the job in one statement: concurrent deliveries get distinct attempt numbers
    with session_scope(ctx.sessions) as s:
        attempt = s.execute(
            update(Job)
            .where(
                Job.id == job_id,
                Job.state.in_((JobState.queued.value, JobState.running.value)),
                Job.cancel_requested.is_(False),
                ~exists().where(Decision.job_id == job_id),
            )
            .values(state=JobState.running.value, attempts=Job.attempts + 1, worker=worker_name(),
                    started_at=func.coalesce(Job.started_at, utcnow()))
            .returning(Job.attempts)
        ).scalar_one_or_none()
        if attempt is not None:
            audit(s, actor, "job.started", "job", job_id, attempt=attempt, worker=worker_name())
    if attempt is None:
        return _not_claimed(ctx, job_id, actor)
    work = ctx.settings.jobs_dir / job_id / f"attempt-{attempt}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        state, error = _run(ctx, job_id, work, actor)
    except TRANSIENT:
        raise
    except core.InputProblem as exc:
        state, error = JobState.failed, "invalid input: " + "; ".join(exc.problems)
    except Exception as exc:
        if type(exc).__name__ == "SoftTimeLimitExceeded":
            state, error = JobState.failed, "time limit exceeded"
        else:
            log.exception("job %s failed", job_id)
            state, error = JobState.failed, f"{type(exc).__name__}: {exc}"
            (work / "traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
    if state is not JobState.succeeded:
        with session_scope(ctx.sessions) as s:
            job = s.get(Job, job_id)
            if not JobState(job.state).terminal:
                _finish(s, job, state, error=error, actor=actor)
    return state.value


def _not_claimed(ctx: Context, job_id: str, actor: str) -> str:
    """Why a delivery did not run the job: finished already, decided already, cancelled, or missing."""
    with session_scope(ctx.sessions) as s:
        job = s.get(Job, job_id)
        if job is None:
            log.error("job %s does not exist; nothing to do", job_id)
            return "missing"
        if JobState(job.state).terminal:
            return job.state  # a redelivery after it finished
        if s.scalar(select(Decision.id).where(Decision.job_id == job_id)) is not None:
            _finish(s, job, JobState.succeeded, error=None, actor=actor)
            return JobState.succeeded.value
        if job.cancel_requested:
            _finish(s, job, JobState.cancelled, error="cancelled before it started", actor=actor)
            return JobState.cancelled.value
        return job.state


def _run(ctx: Context, job_id: str, work: Path, actor: str) -> tuple[JobState, str | None]:
    with ctx.sessions() as s:
        job = s.get(Job, job_id)
        policy_doc = s.get(Policy, job.policy_id).document
        mode, spec, log_refs = job.mode, job.spec, job.logs
        model_name, baseline_job_id, source_job_id = job.model_name, job.baseline_job_id, job.source_job_id
        baseline_files = _log_files(s, baseline_job_id) if baseline_job_id else []
        source_files = _log_files(s, source_job_id) if source_job_id else []
        refs = list(find_refs(spec)) if spec else []
        filenames = dict(s.execute(select(Artifact.sha256, Artifact.filename).where(Artifact.sha256.in_(refs))).all())

    policy = core.parse_policy(policy_doc)
    stopped: str | None = None
    if mode in ("retrain", "evaluate"):
        log_paths, stopped = _run_engine(ctx, job_id, spec, filenames, work)
    elif mode == "metrics":
        log_paths = [ctx.store.open_path(ref) for ref in log_refs]
    elif mode == "regate":
        log_paths = [ctx.store.open_path(sha) for _, sha in source_files]
    else:
        raise core.InputProblem([f"mode: unknown mode {mode!r}"])
    if not log_paths:
        raise core.InputProblem(["the job produced no evaluation log"])
    logs = [core.load_log(p) for p in log_paths]
    stored = _store_logs(ctx, job_id, mode, log_paths, source_files)
    if stopped == "timeout":
        _attach(ctx, job_id, stored)
        return JobState.failed, "time limit exceeded (CLGATE_JOB_SOFT_TIME_LIMIT_S; partial log kept)"
    if stopped:
        _attach(ctx, job_id, stored)
        return JobState.cancelled, "cancelled while running (partial log kept)"

    baseline = core.load_log(ctx.store.open_path(baseline_files[0][1])) if baseline_files else None
    out = work / "gate"
    out.mkdir()
    provenance = {
        "service": {"job_id": job_id, "model_name": model_name, "mode": mode, "worker": actor},
        "baseline_job_id": baseline_job_id,
        "source_job_id": source_job_id,
    }
    decision = core.gate(logs, policy, baseline=baseline, out_dir=out, provenance=provenance)
    for name in RESULT_FILES:
        if (out / name).is_file():
            stored[name] = ctx.store.put_file(out / name).sha256
    document = decision.model_dump(mode="json")
    try:
        return _record(ctx, job_id, model_name, stored, decision.verdict, document, actor)
    except sqlalchemy.exc.IntegrityError:  # another delivery recorded the decision first
        with ctx.sessions() as s:
            job = s.get(Job, job_id)
            return JobState(job.state), job.error


def _record(ctx: Context, job_id: str, model_name: str, stored: dict[str, str], verdict: str, document: dict,
            actor: str) -> tuple[JobState, str | None]:
    with session_scope(ctx.sessions) as s:
        job = s.get(Job, job_id)
        if JobState(job.state).terminal:
            return JobState(job.state), job.error
        _register_files(s, ctx.store, stored, job_id)
        if s.scalar(select(Decision.id).where(Decision.job_id == job_id)) is None:
            s.add(
                Decision(
                    job_id=job_id,
                    policy_id=job.policy_id,
                    model_name=model_name,
                    verdict=verdict,
                    headline=document.get("headline") or {},
                    document=document,
                )
            )
            s.flush()  # the unique key on job_id refuses a second decision here
            audit(s, actor, "decision.recorded", "job", job_id, verdict=verdict, policy_id=job.policy_id)
        job.progress = {**(job.progress or {}), "fraction": 1.0}
        _finish(s, job, JobState.succeeded, error=None, actor=actor)
    return JobState.succeeded, None


def _log_files(s: Session, job_id: str) -> list[tuple[str, str]]:
    rows = s.execute(
        select(JobFile.name, JobFile.sha256).where(JobFile.job_id == job_id, JobFile.name.like("logs/%"))
    ).all()
    return sorted((name, sha) for name, sha in rows)


def _store_logs(ctx: Context, job_id: str, mode: str, paths: list[Path], source_files) -> dict[str, str]:
    if mode == "regate":
        return dict(source_files)
    stored: dict[str, str] = {}
    for i, path in enumerate(paths):
        name = f"logs/{path.name}" if mode != "metrics" else f"logs/log-{i}.json"
        stored[name] = ctx.store.put_file(path).sha256
    return stored


def _register_files(s: Session, store: ArtifactStore, stored: dict[str, str], job_id: str) -> None:
    existing = set(s.scalars(select(JobFile.name).where(JobFile.job_id == job_id)))
    for name, sha in stored.items():
        if s.get(Artifact, sha) is None:
            size = store.path(sha).stat().st_size
            s.add(Artifact(sha256=sha, size=size, kind="result", filename=Path(name).name, created_by="worker"))
            s.flush()
        if name not in existing:
            s.add(JobFile(job_id=job_id, name=name, sha256=sha))


def _attach(ctx: Context, job_id: str, stored: dict[str, str]) -> None:
    with session_scope(ctx.sessions) as s:
        _register_files(s, ctx.store, stored, job_id)


def _run_engine(ctx: Context, job_id: str, spec: dict, filenames: dict[str, str | None], work: Path):
    problems = check_paths(spec)
    if problems:
        raise core.InputProblem(problems)
    inputs = work / "inputs"
    inputs.mkdir()

    def path_of(digest: str) -> str:
        source = ctx.store.open_path(digest)
        name = Path(filenames.get(digest) or digest).name
        link = inputs / f"{digest[:12]}-{name}"
        if not link.exists():
            link.symlink_to(source.resolve())
        return str(link)

    job_spec = core.parse_job_spec(resolve_refs(spec, path_of))
    save_progress, throttle_p = _progress_saver(ctx, job_id), _Throttle(1.0)
    stop_state = {"stop": False}
    throttle_s = _Throttle(0.5)

    def progress(p: Any) -> None:
        if throttle_p.due() or getattr(p, "iteration", None) == getattr(p, "total_iterations", -1):
            save_progress(core.progress_dict(p))

    deadline = time.monotonic() + ctx.settings.job_soft_time_limit_s

    def should_stop() -> bool:
        if time.monotonic() > deadline:
            stop_state["timeout"] = True
            return True
        if not stop_state["stop"] and throttle_s.due():
            with ctx.sessions() as s:
                stop_state["stop"] = bool(s.scalar(select(Job.cancel_requested).where(Job.id == job_id)))
        return stop_state["stop"]

    out = work / "logs"
    out.mkdir()
    paths, stopped = core.run_engine(job_spec, out, progress=progress, should_stop=should_stop, base_dir=inputs)
    return paths, ("timeout" if stop_state.get("timeout") else "cancel") if stopped else None


def _progress_saver(ctx: Context, job_id: str):
    def save(progress: dict[str, Any]) -> None:
        if not progress:
            return
        with session_scope(ctx.sessions) as s:
            job = s.get(Job, job_id)
            if job is not None and job.state == JobState.running.value:
                job.progress = progress

    return save


def referenced_artifacts(spec: dict[str, Any] | None) -> set[str]:
    return set(find_refs(spec)) if spec else set()


# ---------------------------------------------------------------------- heartbeats
def beat(ctx: Context, hostname: str, queues: str) -> None:
    with session_scope(ctx.sessions) as s:
        row = s.get(WorkerHeartbeat, hostname)
        if row is None:
            s.add(WorkerHeartbeat(hostname=hostname, queues=queues, last_seen=utcnow()))
        else:
            row.queues, row.last_seen = queues, utcnow()


def forget(ctx: Context, hostname: str) -> None:
    with session_scope(ctx.sessions) as s:
        row = s.get(WorkerHeartbeat, hostname)
        if row is not None:
            s.delete(row)


class Heartbeat:
    """A daemon thread that records ``hostname`` as alive for ``queues`` every few seconds."""

    def __init__(self, ctx: Context, hostname: str, queues: str) -> None:
        self.ctx, self.hostname, self.queues = ctx, hostname, queues
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="clgate-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                beat(self.ctx, self.hostname, self.queues)
            except Exception:
                log.warning("heartbeat failed", exc_info=True)
            self._stop.wait(self.ctx.settings.worker_heartbeat_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            forget(self.ctx, self.hostname)
        except Exception:  # noqa: BLE001 - the row goes stale and stops counting after CLGATE_WORKER_STALE_S
            log.debug("could not remove the heartbeat of %s", self.hostname, exc_info=True)

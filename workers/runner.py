"""The job task's code, shared by the Celery task and the embedded executor.

``execute_job(job_id)`` claims the job, runs it (engine → logs, or uploaded logs, or a finished job's
logs for a re-gate), gates the logs, stores result files and records the decision — each step a call
into :mod:`clgate.store.jobs` or the library; no SQL here. It is idempotent: a job already finished, or
one that already has its decision, is not run again, and the unique key on ``decisions.job_id`` makes a
second decision impossible even for two deliveries racing. Bad input fails the job with a reason; only
the named transient faults (:data:`TRANSIENT`) escape, for the caller to retry (:data:`MAX_RETRIES`
times, both executors alike).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import redis.exceptions
import sqlalchemy.exc

from clgate.schemas.errors import InputError
from clgate.schemas.vocab import ENGINE_MODES
from clgate.store import Store, history, shared_store
from clgate.store import jobs as records
from clgate.store.models import JobState
from clgate.store.refs import check_paths, resolve_refs
from clgate.store.settings import Settings, load_settings
from clgate.workers import core, pool, sandbox

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
# The one retry policy for transient faults, used by the Celery task and the embedded executor.
MAX_RETRIES = 5
RETRY_BACKOFF_MAX_S = 120


def retry_delay(retry: int) -> float:
    """Seconds to wait before retry number ``retry`` (0-based): exponential, capped."""
    return float(min(RETRY_BACKOFF_MAX_S, 2**retry))


RESULT_FILES = ("decision.json", "metrics.json", "report.html", "report.md", "fmeca.csv", "junit.xml")
worker_name = records.worker_name


def store_for(settings: Settings | None = None) -> Store:
    """This process's store (opened once per settings)."""
    return shared_store(settings or load_settings())


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


# A message can reach a worker before the API's transaction that records its job commits (the API sends,
# then commits, so that a failed send leaves no job): a missing job is looked for this long.
MISSING_GRACE_S = 10.0


def _claim(store: Store, job_id: str, actor: str) -> tuple[int | None, str | None]:
    deadline = time.monotonic() + MISSING_GRACE_S
    while True:
        attempt = records.claim(store, job_id, actor=actor)
        if attempt is not None:
            return attempt, None
        state = records.settle_unclaimed(store, job_id, actor=actor)
        if state != "missing" or time.monotonic() > deadline:
            return None, state
        time.sleep(0.2)


class JobHeartbeat:
    """Records every ``CLGATE_WORKER_HEARTBEAT_S`` that this attempt of a job is alive.

    When the attempt no longer owns its job — the reaper failed it past the hard time limit or re-queued
    it after a silence — the process is ended at once (``os._exit``), whatever the job is doing: a hung
    job cannot outlive its time limit, and a job taken over elsewhere does not run twice.
    """

    def __init__(self, store: Store, job_id: str, attempt: int) -> None:
        self.store, self.job_id, self.attempt = store, job_id, attempt
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"clgate-job-{job_id[:8]}", daemon=True)

    def __enter__(self) -> JobHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.store.settings.worker_heartbeat_s):
            try:
                owned = records.beat_job(self.store, self.job_id, self.attempt)
            except Exception:
                log.warning("job %s: heartbeat failed", self.job_id, exc_info=True)
                continue
            if not owned and not self._stop.is_set():
                log.error(
                    "job %s attempt %d was taken over (time limit or silence): ending this process",
                    self.job_id,
                    self.attempt,
                )
                os._exit(70)


def execute_job(job_id: str, settings: Settings | None = None, *, actor: str | None = None) -> str:
    """Run one job to a terminal state; returns that state. Raises only :data:`TRANSIENT` faults."""
    store = store_for(settings)
    actor = actor or f"worker:{worker_name()}"
    attempt, unclaimed = _claim(store, job_id, actor)
    if attempt is None:
        return unclaimed or "missing"
    work = store.settings.jobs_dir / job_id / f"attempt-{attempt}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        with JobHeartbeat(store, job_id, attempt):
            state, error = _run(store, job_id, work, actor)
    except TRANSIENT as exc:
        try:  # back to queued for the retry: a transient fault is not a lost worker
            records.release(store, job_id, attempt, reason=f"{type(exc).__name__}: {exc}"[:500], actor=actor)
        except Exception:
            log.warning("job %s: could not release attempt %d", job_id, attempt, exc_info=True)
        raise
    except InputError as exc:
        state, error = JobState.failed, "invalid input: " + "; ".join(exc.problems)
    except Exception as exc:
        if type(exc).__name__ == "SoftTimeLimitExceeded":
            state, error = JobState.failed, "time limit exceeded"
        else:
            log.exception("job %s failed", job_id)
            state, error = JobState.failed, f"{type(exc).__name__}: {exc}"
            (work / "traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
    if state is not JobState.succeeded:
        final = records.finish(
            store, job_id, state, error=_job_relative(error, store, work), actor=actor, attempt=attempt
        )
        return (final or state).value
    return state.value


def _job_relative(error: str | None, store: Store, work: Path) -> str | None:
    """A job error as clients may see it: paths relative to the job's folder, no server paths."""
    if error is None:
        return None
    settings = store.settings
    return sandbox.job_relative(
        error,
        (work, ""),
        (sandbox.SANDBOX_ROOT, ""),
        (settings.jobs_dir, "jobs"),
        (settings.data_dir, "data"),
    )


def _run(store: Store, job_id: str, work: Path, actor: str) -> tuple[JobState, str | None]:
    job = records.load_inputs(store, job_id)
    policy = core.parse_policy(job.policy_document)
    stopped: str | None = None
    if job.mode in ENGINE_MODES:
        log_paths, stopped = _run_engine(store, job_id, job.spec or {}, job.filenames, work)
    elif job.mode == "metrics":
        log_paths = [store.artifacts.open_path(ref) for ref in job.log_refs]
    elif job.mode == "regate":
        log_paths = [store.artifacts.open_path(sha) for _, sha in job.source_files]
    else:
        raise InputError([f"mode: unknown mode {job.mode!r}"])
    if stopped:
        stored = _store_logs(store, job.mode, log_paths, job.source_files)
        records.attach_files(store, job_id, stored)
        kept = "partial log kept" if stored else "no usable partial log"
        if stopped == "timeout":
            return JobState.failed, f"time limit exceeded (CLGATE_JOB_SOFT_TIME_LIMIT_S; {kept})"
        return JobState.cancelled, f"cancelled while running ({kept})"
    if not log_paths:
        raise InputError(["the job produced no evaluation log"])
    logs = [core.load_log(p) for p in log_paths]
    stored = _store_logs(store, job.mode, log_paths, job.source_files)

    baseline = (
        core.load_log(store.artifacts.open_path(job.baseline_files[0][1])) if job.baseline_files else None
    )
    out = work / "gate"
    out.mkdir()
    provenance = {
        "service": {"job_id": job_id, "model_name": job.model_name, "mode": job.mode, "worker": actor},
        "baseline_job_id": job.baseline_job_id,
        "source_job_id": job.source_job_id,
        "history_heads": history.store_heads(store),  # signed: `clgate audit verify --head decision.json`
        **job.provenance,  # candidate and build, as `clgate gate` names them
    }
    decision = core.gate(logs, policy, baseline=baseline, out_dir=out, provenance=provenance)
    for name in RESULT_FILES:
        if (out / name).is_file():
            stored[name] = store.artifacts.put_file(out / name).sha256
    document = decision.model_dump(mode="json")
    try:
        return records.record_decision(store, job_id, stored, decision.verdict, document, actor=actor)
    except sqlalchemy.exc.IntegrityError:  # another delivery recorded the decision first
        return records.job_state(store, job_id)


def _store_logs(store: Store, mode: str, paths: list[Path], source_files) -> dict[str, str]:
    if mode == "regate":
        return dict(source_files)
    stored: dict[str, str] = {}
    for i, path in enumerate(paths):
        name = f"logs/{path.name}" if mode != "metrics" else f"logs/log-{i}.json"
        stored[name] = store.artifacts.put_file(path).sha256
    return stored


class SandboxError(RuntimeError):
    """The job's confined child could not run, or ended without a usable result; the message says why."""


def _unpack_image_folder(spec: dict, document: dict, inputs: Path, settings: Settings) -> None:
    """An ``image_folder`` uploaded as a tar or zip archive is extracted (safely: no absolute paths, no
    ``..``, no links) next to its staged copy, on the trusted side, within the bounds the API judged it
    against at submission: those that ``CLGATE_MAX_NPZ_BYTES`` and ``CLGATE_MAX_SAMPLES`` set
    (:meth:`clgate.engine.archive.ArchiveLimits.following`)."""
    data = document.get("data")
    if not (isinstance(data, dict) and data.get("kind") == "image_folder"):
        return
    if not isinstance((spec.get("data") or {}).get("path"), dict):  # not an artifact: check_paths refused it
        return
    # lazy: torch — importing clgate.engine.archive runs clgate.engine's __init__, which loads torch
    from clgate.engine.archive import ArchiveError, ArchiveLimits, safe_extract

    archive = inputs / str(data["path"])
    limits = ArchiveLimits.following(max_bytes=settings.max_npz_bytes, max_samples=settings.max_samples)
    try:
        root = safe_extract(archive, archive.with_name(archive.name + ".d"), limits=limits)
    except ArchiveError as exc:  # the API's words for the same refusal (service/submission.py)
        raise InputError([f"spec.data.path: {exc}"]) from None
    archive.unlink()
    data["path"] = str(root.relative_to(inputs))


def _stage_inputs(store: Store, spec: dict, filenames: dict[str, str | None], staged: sandbox.Staged):
    """Copy the job's inputs out of the store (verified against their hashes) into ``staged.inputs``;
    the validated spec, its paths relative to that folder."""
    problems = check_paths(spec)
    if problems:
        raise InputError(problems)

    def path_of(digest: str) -> str:
        local = f"{digest[:12]}-{Path(filenames.get(digest) or digest).name}"
        if not (staged.inputs / local).exists():
            store.artifacts.copy_to(digest, staged.inputs / local)  # never a link into the store
        return local

    document = resolve_refs(spec, path_of)
    _unpack_image_folder(spec, document, staged.inputs, store.settings)
    job_spec = core.parse_job_spec(document)
    core.check_data_limits(
        job_spec,
        staged.inputs,
        max_bytes=store.settings.max_npz_bytes,
        max_samples=store.settings.max_samples,
    )
    return job_spec


def _run_engine(store: Store, job_id: str, spec: dict, filenames: dict[str, str | None], work: Path):
    """Run the job: this process holds the data and labels, counts and writes the logs; the model runs
    in a confined child (:mod:`clgate.workers.sandbox`) that gets inputs and returns predictions.

    Returns ``(log paths, None)``, or ``(the logs written so far, "cancel" | "timeout")`` when stopped.
    """
    settings = store.settings
    status = sandbox.sandbox_status(settings)
    if status.mode is None:
        raise SandboxError(f"cannot run the model: {status.detail}")
    staged = sandbox.Staged(work)
    job_spec = _stage_inputs(store, spec, filenames, staged)
    throttle_p, throttle_s = _Throttle(1.0), _Throttle(0.5)
    state: dict[str, Any] = {"cancelled": False, "stopped": None}
    deadline = time.monotonic() + settings.job_soft_time_limit_s
    gpu = job_spec.device != "cpu" and Path("/dev/nvidiactl").exists()
    children = pool.current(settings)
    launcher = sandbox.SandboxLauncher(settings, status.mode, staged.work, gpu=gpu, pool=children)

    def on_progress(progress: Any) -> None:
        if throttle_p.due():
            records.save_progress(store, job_id, core.progress_dict(progress))

    def should_stop() -> bool:
        launcher.check()
        if not state["cancelled"] and throttle_s.due():
            state["cancelled"] = records.cancel_requested(store, job_id)
        if state["stopped"] is None:
            state["stopped"] = (
                "cancel" if state["cancelled"] else "timeout" if time.monotonic() > deadline else None
            )
        return state["stopped"] is not None

    try:
        log_paths, stopped = core.run_engine(
            job_spec,
            staged.logs,
            progress=on_progress,
            should_stop=should_stop,
            base_dir=staged.inputs,
            launcher=launcher,
            threads=settings.sandbox_cpu_threads,
            gpu=gpu,
            work_dir=staged.work,
            stop_grace_s=settings.sandbox_kill_grace_s,
            max_file_bytes=settings.sandbox_max_file_bytes,
        )
    except InputError:
        _fail_on_a_limit(launcher, staged, settings)
        log.info("job %s: the engine's child:\n%s", job_id, sandbox.child_log_tail(staged))
        raise
    except Exception as exc:
        # lazy: torch — clgate.engine needs the engine extra (it is loaded by now, on this path)
        from clgate.engine.runner import ChildError

        if not isinstance(exc, ChildError):  # transient faults and the rest keep their own handling
            raise
        _fail_on_a_limit(launcher, staged, settings)
        log.warning("job %s: the engine failed:\n%s", job_id, sandbox.child_log_tail(staged))
        raise SandboxError(str(exc)[:1100]) from None
    finally:
        if children is not None:  # a child that died while waiting, or one of another kind, is replaced
            children.refill()
    if stopped:
        return log_paths, state["stopped"]
    _fail_on_a_limit(launcher, staged, settings)  # a child that reached a limit and carried on fails too
    return log_paths, None


def _fail_on_a_limit(launcher: sandbox.SandboxLauncher, staged: sandbox.Staged, settings: Settings) -> None:
    """Fail the job, naming the setting, when its child reached a size limit the worker enforces: its
    output folder past ``OUTPUT_FILES_FACTOR`` × ``CLGATE_SANDBOX_MAX_FILE_BYTES`` (the child was killed),
    or its standard error (``child.log``) cut at ``CLGATE_SANDBOX_MAX_FILE_BYTES`` by its
    ``RLIMIT_FSIZE``. The engine itself refuses a message, a log or an output file over the bound."""
    limit = settings.sandbox_max_file_bytes
    if launcher.overflow:
        total = sandbox.OUTPUT_FILES_FACTOR * limit
        raise SandboxError(
            f"the job wrote more than {sandbox.OUTPUT_FILES_FACTOR} × CLGATE_SANDBOX_MAX_FILE_BYTES "
            f"({total} bytes) into its output folder and was stopped"
        )
    if sandbox.child_log_size(staged) >= limit:
        raise SandboxError(
            f"the model's process wrote {limit} bytes to its standard error, the most "
            "CLGATE_SANDBOX_MAX_FILE_BYTES allows: its output (child.log) is cut there and the job is failed"
        )


#: Held by the worker heartbeat while it writes, and taken before this process forks (Celery's prefork
#: pool forks a replacement child whenever one dies). SQLite keeps its lock bookkeeping per process: a
#: child forked while the heartbeat's transaction holds the write lock inherits that bookkeeping without
#: the lock, and every connection it opens then reports "database is locked" for as long as it lives.
_FORK_GUARD = threading.Lock()
os.register_at_fork(
    before=_FORK_GUARD.acquire,
    after_in_parent=_FORK_GUARD.release,
    after_in_child=_FORK_GUARD.release,
)


class Heartbeat:
    """A daemon thread that records ``hostname`` as alive for ``queues`` every few seconds (never while
    the process forks, see ``_FORK_GUARD``)."""

    def __init__(self, store: Store, hostname: str, queues: str) -> None:
        self.store, self.hostname, self.queues = store, hostname, queues
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="clgate-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with _FORK_GUARD:
                    records.beat(self.store, self.hostname, self.queues)
            except Exception:
                log.warning("heartbeat failed", exc_info=True)
            self._stop.wait(self.store.settings.worker_heartbeat_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            records.forget(self.store, self.hostname)
        except Exception:
            log.debug("could not remove the heartbeat of %s", self.hostname, exc_info=True)

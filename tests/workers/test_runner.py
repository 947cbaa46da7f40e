"""The job runner shared by Celery and the embedded executor, on a real SQLite file: idempotency under
redelivery, failure with a reason on bad input, one decision per job, migrations equal the models."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from clgate.documents import load_log
from clgate.store.artifacts import ArtifactStore
from clgate.store.db import make_engine, session_scope, upgrade
from clgate.store.models import AuditEvent, Decision, Job, Policy
from clgate.store.settings import Settings
from clgate.workers import runner


@pytest.fixture
def store(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    settings.data_dir.mkdir()
    upgrade(settings.resolved_database_url())
    ctx = runner.store_for(settings)
    return settings, ctx


def _job(ctx, *, logs: list[str], policy: dict, **fields) -> str:
    with session_scope(ctx.sessions) as s:
        p = Policy(name=policy["name"], version="1", document=policy, sha256="0" * 64)
        s.add(p)
        s.flush()
        job = Job(
            mode="metrics", queue="cpu", model_name="m", logs=logs, policy_id=p.id, progress={}, **fields
        )
        s.add(job)
        s.flush()
        return job.id


def _log_ref(ctx, example_log: bytes) -> str:
    from clgate.store.models import Artifact

    stored = ctx.artifacts.put_bytes(example_log)
    with session_scope(ctx.sessions) as s:
        if s.get(Artifact, stored.sha256) is None:
            s.add(Artifact(sha256=stored.sha256, size=stored.size, kind="log"))
    return stored.sha256


def _decisions(ctx, job_id):
    with ctx.sessions() as s:
        return s.scalar(select(func.count()).select_from(Decision).where(Decision.job_id == job_id))


def test_redelivery_never_makes_a_second_decision(store, example_log):
    settings, ctx = store
    job_id = _job(
        ctx,
        logs=[_log_ref(ctx, example_log)],
        policy={"name": "p", "rules": [{"metric": "acc", "floor": 0.1}]},
    )
    assert runner.execute_job(job_id, settings) == "succeeded"
    assert runner.execute_job(job_id, settings) == "succeeded"  # a redelivered message
    assert _decisions(ctx, job_id) == 1
    # a delivery racing the first one: the job looks running again but its decision exists
    with session_scope(ctx.sessions) as s:
        s.get(Job, job_id).state = "running"
    assert runner.execute_job(job_id, settings) == "succeeded"
    assert _decisions(ctx, job_id) == 1
    with ctx.sessions() as s:
        assert s.get(Job, job_id).attempts == 1


def test_two_concurrent_deliveries_make_one_decision(store, example_log):
    settings, ctx = store
    job_id = _job(
        ctx,
        logs=[_log_ref(ctx, example_log)],
        policy={"name": "p", "rules": [{"metric": "acc", "floor": 0.1}]},
    )
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(runner.execute_job(job_id, settings)))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the second delivery either finds the decision, or the first one alive on the job and leaves it
    assert sorted(results) in (["running", "succeeded"], ["succeeded", "succeeded"])
    assert _decisions(ctx, job_id) == 1


def test_bad_log_fails_the_job_with_a_reason(store):
    settings, ctx = store
    bad = ctx.artifacts.put_bytes(b'{"format": "clgate.evaluation-log/v1", "tasks": [], "points": []}').sha256
    from clgate.store.models import Artifact

    with session_scope(ctx.sessions) as s:
        s.add(Artifact(sha256=bad, size=10, kind="log"))
    job_id = _job(ctx, logs=[bad], policy={"name": "p", "rules": [{"metric": "acc", "floor": 0.1}]})
    assert runner.execute_job(job_id, settings) == "failed"
    with ctx.sessions() as s:
        job = s.get(Job, job_id)
        assert job.error.startswith("invalid input") and "tasks" in job.error
        assert job.finished_at is not None
    assert _decisions(ctx, job_id) == 0


def test_cancelled_before_start_does_not_run(store, example_log):
    settings, ctx = store
    job_id = _job(
        ctx,
        logs=[_log_ref(ctx, example_log)],
        policy={"name": "p", "rules": [{"metric": "acc", "floor": 0.1}]},
        cancel_requested=True,
    )
    assert runner.execute_job(job_id, settings) == "cancelled"
    assert _decisions(ctx, job_id) == 0


def test_transient_faults_escape_for_a_retry(store, example_log, monkeypatch):
    settings, ctx = store
    job_id = _job(
        ctx,
        logs=[_log_ref(ctx, example_log)],
        policy={"name": "p", "rules": [{"metric": "acc", "floor": 0.1}]},
    )

    def unavailable(*a, **k):
        raise runner.TransientJobError("store briefly away")

    monkeypatch.setattr(runner.core, "gate", unavailable)
    with pytest.raises(runner.TransientJobError):
        runner.execute_job(job_id, settings)
    monkeypatch.undo()
    assert runner.execute_job(job_id, settings) == "succeeded"  # the retry
    with ctx.sessions() as s:
        assert s.get(Job, job_id).attempts == 2


def test_decisions_are_never_edited(store, example_log):
    settings, ctx = store
    job_id = _job(
        ctx,
        logs=[_log_ref(ctx, example_log)],
        policy={"name": "p", "rules": [{"metric": "acc", "floor": 0.99}]},
    )
    runner.execute_job(job_id, settings)
    engine = ctx.sessions.kw["bind"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT verdict FROM decisions")).scalar() == "FAIL"
        with pytest.raises(Exception, match="append-only"):
            conn.execute(text("UPDATE decisions SET verdict = 'PASS'"))
    with ctx.sessions() as s:
        actions = [e.action for e in s.scalars(select(AuditEvent).where(AuditEvent.subject_id == job_id))]
    assert actions == ["job.started", "decision.recorded", "job.succeeded"]


def test_migrations_match_the_models(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from clgate.store.models import Base

    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    with make_engine(url).connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_artifact_store_is_atomic_and_deduplicated(tmp_path):
    store = ArtifactStore(tmp_path)
    a = store.put_bytes(b"abc")
    b = store.put_bytes(b"abc")
    assert a.sha256 == b.sha256 and a.created and not b.created
    assert not list((tmp_path / "tmp").iterdir())
    with pytest.raises(ValueError, match="not an artifact reference"):
        store.path("../../etc/passwd")


def test_settings_are_validated_at_start_up(tmp_path):
    import subprocess
    import sys

    env = {
        "CLGATE_BROKER_URL": "amqp://guest@localhost//",
        "CLGATE_DATA_DIR": str(tmp_path),
        "PATH": "/usr/bin:/bin",
    }
    r = subprocess.run(
        [sys.executable, "-m", "clgate", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "CLGATE_BROKER_URL" in r.stderr and "redis://" in r.stderr
    with pytest.raises(ValueError, match="CLGATE_JOB_SOFT_TIME_LIMIT_S"):
        Settings(job_soft_time_limit_s=100, job_time_limit_s=50)


def test_time_limit_stops_a_training_job_between_iterations(tmp_path, migrated_store, long_job):
    from clgate.store.models import JobFile

    settings = Settings(data_dir=tmp_path / "data", job_soft_time_limit_s=2, job_time_limit_s=3)
    ctx = migrated_store(settings)
    job_id = long_job(ctx, eval_every=50)
    t0 = time.monotonic()
    assert runner.execute_job(job_id, settings) == "failed"
    assert time.monotonic() - t0 < 60
    with ctx.sessions() as s:
        job = s.get(Job, job_id)
        assert "time limit exceeded" in job.error
        assert job.progress.get("iteration", 0) > 0
        names = list(s.scalars(select(JobFile.name).where(JobFile.job_id == job_id)))
    assert names == ["logs/log-seed0.json"]

    with ctx.sessions() as s:
        sha = s.scalar(select(JobFile.sha256).where(JobFile.job_id == job_id))
    assert load_log(ctx.artifacts.path(sha)).partial
    assert _decisions(ctx, job_id) == 0


def test_embedded_executor_resumes_jobs_left_by_a_previous_run(tmp_path, example_log):
    """A job queued (or running) when the API stopped is run when the embedded executor starts again."""
    from clgate.workers.embedded import EmbeddedExecutor

    settings = Settings(data_dir=tmp_path / "data")
    settings.data_dir.mkdir()
    upgrade(settings.resolved_database_url())
    ctx = runner.store_for(settings)
    job_id = _job(
        ctx,
        logs=[_log_ref(ctx, example_log)],
        policy={"name": "p", "rules": [{"metric": "acc", "floor": 0.1}]},
        state="running",
        attempts=1,
    )
    executor = EmbeddedExecutor(settings)
    executor.start()
    try:
        deadline = time.monotonic() + 90
        while True:
            with ctx.sessions() as s:
                job = s.get(Job, job_id)
                if job.state in ("succeeded", "failed"):
                    break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert job.state == "succeeded" and job.attempts == 2
        assert _decisions(ctx, job_id) == 1
    finally:
        executor.shutdown()


def _wait_state(ctx, job_id, states, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        with ctx.sessions() as s:
            job = s.get(Job, job_id)
            if job.state in states and (job.state != "running" or (job.progress or {}).get("iteration")):
                return job
        assert time.monotonic() < deadline, job.state
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.integration
def test_embedded_shutdown_stops_the_job_process_and_the_next_start_resumes(
    tmp_path, migrated_store, long_job
):
    from clgate.workers.embedded import EmbeddedExecutor

    settings = Settings(data_dir=tmp_path / "data")
    ctx = migrated_store(settings)
    job_id = long_job(ctx)
    executor = EmbeddedExecutor(settings)
    executor.start()
    executor.submit(job_id, queue="gpu")
    job = _wait_state(ctx, job_id, {"running"})
    pid = int(job.worker.rsplit(":", 1)[1])
    executor.shutdown()
    deadline = time.monotonic() + 15
    while _alive(pid):
        assert time.monotonic() < deadline, "the job's process outlived the executor"
        time.sleep(0.1)
    with ctx.sessions() as s:
        assert s.get(Job, job_id).state == "running"  # left for the next start
    again = EmbeddedExecutor(settings)
    again.start()
    try:
        job = _wait_state(ctx, job_id, {"running"})
        while job.attempts < 2:
            job = _wait_state(ctx, job_id, {"running"})
        with session_scope(ctx.sessions) as s:
            s.get(Job, job_id).cancel_requested = True
        assert _wait_state(ctx, job_id, {"cancelled", "failed", "succeeded"}).state == "cancelled"
    finally:
        again.shutdown()


@pytest.mark.integration
def test_embedded_job_process_exits_when_the_api_process_dies(tmp_path, migrated_store, long_job):
    import os
    import signal
    import subprocess
    import sys

    settings = Settings(data_dir=tmp_path / "data")
    ctx = migrated_store(settings)
    job_id = long_job(ctx)
    script = (
        "import sys, time\n"
        "from clgate.store.settings import Settings\n"
        "from clgate.workers.embedded import EmbeddedExecutor\n"
        "if __name__ == '__main__':\n"
        f"    e = EmbeddedExecutor(Settings(data_dir={str(settings.data_dir)!r}))\n"
        "    e.start()\n"
        "    time.sleep(600)\n"
    )
    api = subprocess.Popen([sys.executable, "-c", script], cwd=str(Path(__file__).resolve().parents[2]))
    try:
        job = _wait_state(ctx, job_id, {"running"})  # resumed from the store at start
        pid = int(job.worker.rsplit(":", 1)[1])
        os.kill(api.pid, signal.SIGKILL)
        api.wait(timeout=10)
        deadline = time.monotonic() + 15
        while _alive(pid):
            assert time.monotonic() < deadline, "the job's process outlived the dead API process"
            time.sleep(0.2)
    finally:
        if api.poll() is None:
            api.kill()

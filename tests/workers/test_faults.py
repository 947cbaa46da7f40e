"""No stranded job, on real processes: `clgate serve` with a real Celery worker on a real redis-server.

* a whole Celery worker killed (kill -9 of its process group) mid-job, a new worker started: the job is
  queued again after the stale period and completes exactly once;
* a job that hangs past the hard time limit (ignoring the soft one): failed with that reason;
* a job that crashes its worker every time: failed after ``CLGATE_MAX_WORKER_LOSSES`` (3) losses;
* Redis restarted without persistence: the queued jobs it forgot are sent again and completed.

Settings are small (stale after 3 s, a supervisor pass every second) so that each test takes seconds.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.service import Proc, Service, _wait, free_port, redis_argv

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAST = {
    "CLGATE_WORKER_HEARTBEAT_S": "0.5",
    "CLGATE_WORKER_STALE_S": "3",
    "CLGATE_REAPER_INTERVAL_S": "1",
    "CLGATE_REQUEUE_GRACE_S": "2",
}
POLICY = {"name": "faults", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}
HERE = Path(__file__).resolve().parent


def _metrics_job(svc: Service, example_log: bytes) -> str:
    sub = svc.clients["submitter"]
    svc.clients["approver"].post("/v1/policies", json=POLICY)
    ref = sub.post("/v1/artifacts", params={"kind": "log"}, content=example_log).json()["ref"]
    r = sub.post(
        "/v1/jobs",
        json={
            "mode": "metrics",
            "model_name": "faults",
            "logs": [ref],
            "policy": {"name": "faults", "version": "1"},
        },
    )
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _actions(svc: Service, job_id: str) -> list[str]:
    events = (
        svc.clients["viewer"].get("/v1/audit", params={"subject_id": job_id, "limit": 500}).json()["data"]
    )
    return [e["action"] for e in events]


def _faulty_worker(svc: Service, fault: str) -> Proc:
    svc.worker = Proc(
        [sys.executable, str(HERE / "faulty_worker.py"), f"{fault}-{svc.port}@%h", fault],
        svc.env,
        svc.tmp / f"worker-{fault}.log",
    )
    return svc.worker


def test_whole_worker_killed_mid_job_completes_once_on_a_new_worker(
    tmp_path, redis_url, digits_npz, make_spec
):
    svc = Service(tmp_path, redis_url, extra_env=FAST)
    try:
        sub, view = svc.clients["submitter"], svc.clients["viewer"]
        svc.clients["approver"].post("/v1/policies", json=POLICY)
        ref = sub.post(
            "/v1/artifacts", params={"kind": "data", "filename": "d.npz"}, content=digits_npz
        ).json()["ref"]
        job = sub.post(
            "/v1/jobs",
            json={
                "mode": "retrain",
                "model_name": "faults",
                "spec": make_spec(ref, iterations=1500),
                "policy": {"name": "faults", "version": "1"},
            },
        ).json()
        deadline = time.monotonic() + 120
        while not (
            (state := view.get(f"/v1/jobs/{job['id']}").json())["state"] == "running"
            and (state["progress"].get("iteration") or 0) > 0
        ):
            assert time.monotonic() < deadline and state["state"] in ("queued", "running"), state
            time.sleep(0.1)
        os.killpg(svc.worker.popen.pid, signal.SIGKILL)  # the whole worker: main process and its children
        svc.worker.popen.wait(timeout=10)
        svc.start_worker("second")
        done = svc.wait_job(job["id"], timeout=200)
        assert done["state"] == "succeeded" and done["attempts"] == 2, done
        actions = _actions(svc, job["id"])
        assert actions.count("job.requeued") == 1 and actions.count("decision.recorded") == 1, actions
        assert actions.count("job.succeeded") == 1, actions
    finally:
        svc.close()


def test_hard_time_limit_fails_the_job_with_the_reason(tmp_path, redis_url, example_log):
    env = {**FAST, "CLGATE_JOB_SOFT_TIME_LIMIT_S": "2", "CLGATE_JOB_TIME_LIMIT_S": "4"}
    svc = Service(tmp_path, redis_url, extra_env=env, worker=False)
    try:
        _faulty_worker(svc, "hang")
        job_id = _metrics_job(svc, example_log)
        done = svc.wait_job(job_id, timeout=120)
        assert done["state"] == "failed" and "hard time limit exceeded" in done["error"], done
        assert "CLGATE_JOB_TIME_LIMIT_S=4" in done["error"] and done["attempts"] == 1
        assert done["finished_at"] is not None
    finally:
        svc.close()


def test_a_job_that_crashes_its_worker_fails_after_the_cap(tmp_path, redis_url, example_log):
    svc = Service(tmp_path, redis_url, extra_env=FAST, worker=False)
    try:
        _faulty_worker(svc, "crash")
        job_id = _metrics_job(svc, example_log)
        done = svc.wait_job(job_id, timeout=150)
        assert done["state"] == "failed" and "crashed the worker 3 times" in done["error"], done
        assert done["attempts"] == 3, done
        assert _actions(svc, job_id).count("job.requeued") == 2
        assert svc.worker.popen.poll() is None  # the worker itself lives on and takes other jobs
    finally:
        svc.close()


def test_redis_restarted_without_persistence_queued_jobs_are_sent_again(
    tmp_path, require_binary, example_log
):
    binary = require_binary("redis-server")
    port = free_port()
    (tmp_path / "redis").mkdir()
    argv = redis_argv(binary, port, tmp_path / "redis")
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    server = Proc(argv, dict(os.environ), tmp_path / "redis.log")
    svc = None
    try:
        _wait(client.ping, 20, "redis-server", server.popen, server.log)
        svc = Service(tmp_path, f"redis://127.0.0.1:{port}/0", extra_env=FAST, worker=False)
        jobs = [_metrics_job(svc, example_log) for _ in range(5)]
        assert client.llen("cpu") == 5  # no worker yet: all waiting in the broker
        server.stop()  # Redis goes away and comes back empty
        server = Proc(argv, dict(os.environ), tmp_path / "redis-2.log")
        _wait(client.ping, 20, "redis-server", server.popen, server.log)
        assert client.llen("cpu") == 0
        svc.start_worker("after-restart")
        for job_id in jobs:
            done = svc.wait_job(job_id, timeout=150)
            assert done["state"] == "succeeded", done
            assert _actions(svc, job_id).count("decision.recorded") == 1
        ready = httpx.get(svc.url + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
    finally:
        if svc is not None:
            svc.close()
        client.close()
        server.stop()


def test_embedded_executor_requeues_a_job_whose_process_died(tmp_path, migrated_store, long_job):
    """The same supervisor for the embedded executor: its job process killed → queued again, run again."""
    from sqlalchemy import select

    from clgate.store.db import session_scope
    from clgate.store.models import AuditEvent, Job
    from clgate.store.settings import Settings
    from clgate.workers.embedded import EmbeddedExecutor

    settings = Settings(
        data_dir=tmp_path / "data", worker_heartbeat_s=0.5, worker_stale_s=3, reaper_interval_s=1
    )
    ctx = migrated_store(settings)
    job_id = long_job(ctx)

    def wait(predicate, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            with ctx.sessions() as s:
                job = s.get(Job, job_id)
                if predicate(job):
                    return job
            assert time.monotonic() < deadline, (job.state, job.attempts, job.error)
            time.sleep(0.2)

    executor = EmbeddedExecutor(settings)
    executor.start()
    try:
        executor.submit(job_id, queue="gpu")
        job = wait(lambda j: j.state == "running" and (j.progress or {}).get("iteration"))
        os.kill(int(job.worker.rsplit(":", 1)[1]), signal.SIGKILL)
        job = wait(lambda j: j.attempts == 2 and j.state == "running")
        assert job.worker_losses == 1
        with session_scope(ctx.sessions) as s:
            s.get(Job, job_id).cancel_requested = True
        assert wait(lambda j: j.state in ("cancelled", "failed", "succeeded")).state == "cancelled"
        with ctx.sessions() as s:
            actions = list(s.scalars(select(AuditEvent.action).where(AuditEvent.subject_id == job_id)))
        assert actions.count("job.requeued") == 1 and actions.count("job.started") == 2, actions
    finally:
        executor.shutdown()

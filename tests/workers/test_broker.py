"""Celery mode without a worker, on a real redis-server: jobs land on the queue of their mode (gpu for
retrain/evaluate, cpu for metrics-only and re-gates), the queue length gauge reads the Redis lists,
readiness reports the broker; and the Celery configuration carries the delivery guarantees."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_jobs_are_routed_to_their_queue(redis_url, app_factory, test_client_class, admin_key, example_log):
    import redis

    app, _ = app_factory(broker_url=redis_url)
    h = {"X-API-Key": admin_key}
    r = redis.Redis.from_url(redis_url)
    with test_client_class(app) as c:
        assert c.get("/readyz").json()["checks"]["broker"] == "broker ok"
        c.post(
            "/v1/policies", json={"name": "p", "rules": [{"metric": "acc", "floor": 0.5}]}, headers=h
        ).raise_for_status()
        ref = c.post("/v1/artifacts", content=example_log, headers=h).json()["ref"]
        spec = {"data": "digits", "scenario": {"n_tasks": 5}, "training": {"iterations": 5}}
        retrain = c.post(
            "/v1/jobs",
            json={
                "mode": "retrain",
                "model_name": "m",
                "spec": spec,
                "policy": {"name": "p", "version": "1"},
            },
            headers=h,
        )
        assert retrain.status_code == 202 and retrain.json()["queue"] == "gpu"
        metrics = c.post(
            "/v1/jobs",
            json={
                "mode": "metrics",
                "model_name": "m",
                "logs": [ref],
                "policy": {"name": "p", "version": "1"},
            },
            headers=h,
        )
        assert metrics.json()["queue"] == "cpu"
        assert (r.llen("gpu"), r.llen("cpu")) == (1, 1)
        import json

        message = json.loads(r.lindex("gpu", 0))
        assert (
            message["headers"]["task"] == "clgate.run_job"
            and message["headers"]["id"] == retrain.json()["id"]
        )
        # Celery mode: the API replica exports per-process series only; the deployment's (queue lengths
        # from the Redis lists) come from `clgate exporter`'s registry, once per deployment
        text = c.get("/metrics", headers=h).text
        assert 'store_metrics="false"' in text and "clgate_queue_length" not in text
        from prometheus_client import generate_latest

        from clgate.service.metrics import exporter_registry

        registry = exporter_registry(c.app.state.sessions, queue_lengths=c.app.state.dispatcher.queue_lengths)
        text = generate_latest(registry).decode()
        assert (
            'clgate_queue_length{queue="gpu"} 1.0' in text and 'clgate_queue_length{queue="cpu"} 1.0' in text
        )
        # cancelling a queued job needs no worker; the message left on the queue is skipped when delivered
        assert c.post(f"/v1/jobs/{retrain.json()['id']}/cancel", headers=h).json()["state"] == "cancelled"
    r.close()


def test_readiness_fails_without_the_broker(app_factory, test_client_class):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    app, _ = app_factory(broker_url=f"redis://127.0.0.1:{port}/0")
    with test_client_class(app) as c:
        r = c.get("/readyz")
        assert r.status_code == 503
        assert r.json()["checks"]["broker"].startswith("broker unreachable")
        assert r.json()["checks"]["database"] == "ok"
        assert c.get("/healthz").status_code == 200


def test_celery_configuration_carries_the_guarantees():
    from clgate.store.settings import Settings
    from clgate.workers.app import celery_config
    from clgate.workers.runner import TRANSIENT
    from clgate.workers.tasks import run_job

    settings = Settings(broker_url="redis://127.0.0.1:1/0", job_soft_time_limit_s=100, job_time_limit_s=160)
    conf = celery_config(settings)
    assert conf["task_acks_late"] and conf["task_reject_on_worker_lost"]
    assert conf["worker_prefetch_multiplier"] == 1
    assert (conf["task_soft_time_limit"], conf["task_time_limit"]) == (100, 160)
    assert conf["broker_transport_options"]["visibility_timeout"] > conf["task_time_limit"]
    assert {q.name for q in conf["task_queues"]} == {"gpu", "cpu"}
    assert run_job.acks_late and run_job.reject_on_worker_lost
    assert tuple(run_job.autoretry_for) == TRANSIENT and Exception not in TRANSIENT


def test_keys_create_cli_makes_a_working_key(tmp_path, app_factory, test_client_class):
    from typer.testing import CliRunner

    from clgate.cli import app as cli

    result = CliRunner().invoke(
        cli,
        [
            "keys",
            "create",
            "--role",
            "approver",
            "--name",
            "release-bot",
            "--data-dir",
            str(tmp_path / "data"),
        ],
    )
    assert result.exit_code == 0, result.output
    key = result.output.strip().splitlines()[-1]
    bad = CliRunner().invoke(
        cli, ["keys", "create", "--role", "boss", "--name", "x", "--data-dir", str(tmp_path)]
    )
    assert bad.exit_code == 2 and "--role" in bad.output
    bad = CliRunner().invoke(
        cli,
        [
            "keys",
            "create",
            "--role",
            "viewer",
            "--name",
            "x",
            "--project",
            "Team B",
            "--data-dir",
            str(tmp_path),
        ],
    )
    assert bad.exit_code == 2 and "--project" in bad.output
    other = CliRunner().invoke(
        cli,
        [
            "keys",
            "create",
            "--role",
            "viewer",
            "--name",
            "b",
            "--project",
            "team-b",
            "--data-dir",
            str(tmp_path / "data"),
        ],
    )
    assert other.exit_code == 0, other.output
    other_key = other.output.strip().splitlines()[-1]
    app, _ = app_factory()
    with test_client_class(app) as c:
        me = c.get("/v1/whoami", headers={"X-API-Key": key}).json()
        assert me == {"id": me["id"], "name": "release-bot", "role": "approver", "project": "default"}
        events = c.get("/v1/audit", params={"action": "key.created"}, headers={"X-API-Key": key}).json()[
            "data"
        ]
        assert any(e["details"]["name"] == "release-bot" and e["actor"].startswith("cli:") for e in events)
        assert c.get("/v1/whoami", headers={"X-API-Key": other_key}).json()["project"] == "team-b"

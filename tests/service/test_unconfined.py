"""CLGATE_ALLOW_UNCONFINED=true is a laptop-only escape hatch: `clgate serve`, `clgate worker`, the log
and /readyz each say so; with CLGATE_SANDBOX=bwrap a worker without a working bwrap refuses to start."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from clgate.cli import app as cli

HATCH = "CLGATE_ALLOW_UNCONFINED=true is a laptop-only escape hatch"


@pytest.fixture
def no_bwrap(monkeypatch):
    """This machine as a container whose runtime cannot start bwrap."""
    from clgate.workers import sandbox

    real_which = shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in ("CLGATE_SANDBOX", "CLGATE_ALLOW_UNCONFINED", "CLGATE_BROKER_URL", "CLGATE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CLGATE_BOOTSTRAP_ADMIN_KEY", raising=False)
    monkeypatch.setenv("CLGATE_AUTO_MIGRATE", "true")  # and restored after: `clgate serve` sets it to false
    return monkeypatch


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """Records what would have been started (uvicorn, the Celery worker) instead of starting it; the
    worker's broker check passes (tests/cli/test_operator_errors.py covers an unreachable broker)."""
    calls: list[str] = []
    import uvicorn

    from clgate.cli import service_cmd
    from clgate.workers.app import app as celery_app

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: calls.append("uvicorn"))
    monkeypatch.setattr(celery_app, "worker_main", lambda argv: calls.append("celery"))
    monkeypatch.setattr(service_cmd, "_check_broker", lambda url, **k: None)
    return calls


def _run(*argv: str):
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def test_serve_announces_unconfined_embedded_jobs(env, started):
    env.setenv("CLGATE_SANDBOX", "none")
    env.setenv("CLGATE_ALLOW_UNCONFINED", "true")
    r = _run("serve")
    assert r.exit_code == 0 and started == ["uvicorn"]
    assert "SUBMITTED MODELS RUN UNCONFINED" in r.stderr and HATCH in r.stderr


def test_serve_under_bwrap_says_nothing_of_the_kind(env, started, require_binary):
    require_binary("bwrap", "bubblewrap")
    r = _run("serve")
    assert r.exit_code == 0 and started == ["uvicorn"]
    assert "UNCONFINED" not in r.stderr and "UNAVAILABLE" not in r.stderr


def test_worker_announces_unconfined_jobs(env, started, no_bwrap):
    env.setenv("CLGATE_BROKER_URL", "redis://127.0.0.1:1/0")
    env.setenv("CLGATE_ALLOW_UNCONFINED", "true")
    r = _run("worker", "--queues", "gpu")
    assert r.exit_code == 0 and started == ["celery"]
    assert "SUBMITTED MODELS RUN UNCONFINED" in r.stderr and HATCH in r.stderr


def test_worker_with_sandbox_bwrap_refuses_to_start_without_it(env, started, no_bwrap):
    env.setenv("CLGATE_BROKER_URL", "redis://127.0.0.1:1/0")
    env.setenv("CLGATE_SANDBOX", "bwrap")
    env.setenv("CLGATE_ALLOW_UNCONFINED", "true")  # no hatch for an operator who asked for bwrap
    r = _run("worker", "--queues", "gpu")
    assert r.exit_code == 2 and started == []
    assert "error: CLGATE_SANDBOX=bwrap: " in r.stderr and "bwrap not found" in r.stderr
    assert "Traceback" not in r.output


def test_the_log_announces_it(caplog, no_bwrap):
    from clgate.store.settings import Settings
    from clgate.workers.sandbox import warn_if_unconfined

    with caplog.at_level("WARNING", logger="clgate.sandbox"):
        status = warn_if_unconfined(Settings(data_dir="/nonexistent", allow_unconfined=True))
    assert status.mode == "none" and HATCH in caplog.text


def test_readyz_announces_it_embedded(app_factory, test_client_class):
    app, _ = app_factory(sandbox="none", allow_unconfined=True)
    with test_client_class(app) as client:
        check = client.get("/readyz").json()["checks"]["sandbox"]
    assert check.startswith("UNCONFINED") and "laptop-only escape hatch" in check


def test_readyz_announces_it_in_celery_mode(app_factory, test_client_class):
    app, _ = app_factory(broker_url="redis://127.0.0.1:1/0", allow_unconfined=True)
    with test_client_class(app) as client:
        check = client.get("/readyz").json()["checks"]["sandbox"]
    assert check.startswith("in the workers") and "CLGATE_ALLOW_UNCONFINED=true is set here" in check

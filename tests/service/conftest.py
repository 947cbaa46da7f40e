"""Fixtures of the service tests: free loopback ports, a real redis-server, the API under uvicorn and
a real Celery worker as subprocesses, an HTTP client with keys of every role, and small inputs
(digits as an NPZ artifact, tiny training settings, policies whose verdicts are known).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
ADMIN_KEY = "clg_00000000000000ad_" + "a" * 43
ROLES = ("viewer", "submitter", "approver", "admin")
TERMINAL = {"succeeded", "failed", "cancelled"}

LOOSE_POLICY = {"name": "e2e-loose", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}
STRICT_POLICY = {"name": "e2e-strict", "version": "1", "rules": [{"metric": "mica", "floor": 0.99}]}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{_tail(log)}")
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout}s:\n{_tail(log)}")


def _tail(log: Path | None, n: int = 4000) -> str:
    if log is None or not log.exists():
        return ""
    return log.read_text(errors="replace")[-n:]


class Proc:
    """A subprocess with its output in a file; stopped with SIGTERM then SIGKILL."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")
        self.popen = subprocess.Popen(argv, env=env, cwd=REPO, stdout=self._out, stderr=subprocess.STDOUT,
                                      start_new_session=True)

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=5)
        self._out.close()

    def tail(self) -> str:
        return _tail(self.log)


def base_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env.update({
        "CLGATE_DATA_DIR": str(data_dir),
        "CLGATE_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "CLGATE_WORKER_HEARTBEAT_S": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    })
    env.update(extra)
    return env


@pytest.fixture
def redis_url(require_binary, tmp_path) -> Iterator[str]:
    """A real redis-server on a free loopback port (no persistence), stopped after the test."""
    binary = require_binary("redis-server")
    port = free_port()
    workdir = tmp_path / "redis"
    workdir.mkdir()
    proc = Proc([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(workdir)], dict(os.environ), tmp_path / "redis.log")
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        _wait(client.ping, 20, "redis-server", proc.popen, proc.log)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.stop()


class Service:
    """``clgate serve`` and, in Celery mode, ``clgate worker`` as subprocesses; an HTTP client per role."""

    def __init__(self, tmp_path: Path, broker_url: str | None) -> None:
        self.tmp = tmp_path
        self.data_dir = tmp_path / "data"
        extra = {"CLGATE_BROKER_URL": broker_url} if broker_url else {}
        self.env = base_env(self.data_dir, **extra)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = Proc([sys.executable, "-m", "clgate", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                         "--log-level", "warning"], self.env, tmp_path / "api.log")
        self.worker: Proc | None = None
        self.clients: dict[str, httpx.Client] = {}
        try:
            _wait(lambda: httpx.get(self.url + "/readyz", timeout=2).status_code == 200, 90, "API", self.api.popen,
                  self.api.log)
            if broker_url:
                self.worker = Proc([sys.executable, "-m", "clgate", "worker", "--queues", "gpu,cpu",
                                    "--hostname", f"e2e-{self.port}@%h"], self.env, tmp_path / "worker.log")
            self.clients["admin"] = self.client(ADMIN_KEY)
            for role in ROLES[:-1]:
                r = self.clients["admin"].post("/v1/keys", json={"name": f"e2e-{role}", "role": role})
                r.raise_for_status()
                self.clients[role] = self.client(r.json()["key"])
        except BaseException:
            self.close()
            raise

    def client(self, key: str | None) -> httpx.Client:
        headers = {"X-API-Key": key} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def wait_job(self, job_id: str, timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        viewer = self.clients["viewer"]
        while time.monotonic() < deadline:
            job = viewer.get(f"/v1/jobs/{job_id}").json()
            if job["state"] in TERMINAL:
                return job
            for proc in (self.api, self.worker):
                if proc is not None and proc.popen.poll() is not None:
                    raise RuntimeError(f"a service process exited:\n{proc.tail()}")
            time.sleep(0.25)
        raise TimeoutError(f"job {job_id} not finished after {timeout}s: {job}\n"
                           f"API:\n{self.api.tail()}\nworker:\n{self.worker.tail() if self.worker else ''}")

    def close(self) -> None:
        for c in self.clients.values():
            c.close()
        if self.worker is not None:
            self.worker.stop()
        self.api.stop()


@pytest.fixture
def embedded_service(tmp_path) -> Iterator[Service]:
    service = Service(tmp_path, None)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def celery_service(tmp_path, redis_url) -> Iterator[Service]:
    service = Service(tmp_path, redis_url)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture(scope="session")
def digits_npz() -> bytes:
    """scikit-learn digits as an NPZ (x in [0, 1], float32), split in halves: an uploadable data artifact."""
    import numpy as np
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype("float32")
    y = d.target.astype("int64")
    buf = io.BytesIO()
    np.savez(buf, x_train=x[::2], y_train=y[::2], x_test=x[1::2], y_test=y[1::2])
    return buf.getvalue()


def tiny_spec(data_ref: str, **training) -> dict:
    """A retrain job on digits small enough for a 2-core test run (5 tasks, a few updates each)."""
    return {
        "data": {"kind": "npz", "path": {"artifact": data_ref}},
        "scenario": {"n_tasks": 5},
        "model": {"arch": "mlp", "hidden": 32},
        "strategy": {"name": "finetune"},
        "training": {"iterations": 20, "batch_size": 32, **training},
        "evaluation": {"eval_every": 10},
        "seeds": [0],
        "device": "cpu",
    }


@pytest.fixture
def make_spec():
    return tiny_spec


@pytest.fixture
def policies():
    return {"loose": LOOSE_POLICY, "strict": STRICT_POLICY}


@pytest.fixture
def example_log() -> bytes:
    return (REPO / "examples" / "logs" / "spec-example.json").read_bytes()


@pytest.fixture
def app_factory(tmp_path):
    """``app_factory(**settings)`` → (FastAPI app, settings) on a fresh data dir, embedded mode."""
    from service.app import create_app
    from service.settings import Settings

    def make(**overrides):
        settings = Settings(data_dir=tmp_path / "data", bootstrap_admin_key=ADMIN_KEY, **overrides)
        return create_app(settings), settings

    return make


@pytest.fixture
def test_client_class():
    """FastAPI's TestClient (its import warns that starlette prefers httpx2; not our concern here)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from fastapi.testclient import TestClient
    return TestClient


@pytest.fixture
def api(app_factory, test_client_class):
    """An in-process client (TestClient, lifespan run) with keys of every role: ``api.as_role("viewer")``."""
    TestClient = test_client_class
    app, settings = app_factory()
    with TestClient(app) as client:
        keys = {"admin": ADMIN_KEY}
        for role in ROLES[:-1]:
            r = client.post("/v1/keys", json={"name": f"t-{role}", "role": role}, headers={"X-API-Key": ADMIN_KEY})
            assert r.status_code == 201, r.text
            keys[role] = r.json()["key"]
        client.keys = keys
        client.settings = settings
        client.as_role = lambda role: {"X-API-Key": keys[role]}
        yield client


@pytest.fixture
def admin_key() -> str:
    return ADMIN_KEY


@pytest.fixture
def postgres_url(require_binary) -> Iterator[str]:
    """A real PostgreSQL server (initdb + pg_ctl) on a free loopback port, in a throw-away folder."""
    import glob
    import shutil
    import tempfile

    # Debian's postgresql package keeps its programs in /usr/lib/postgresql/<version>/bin, off the PATH
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))), None)
    if found is None:
        require_binary("initdb", "postgresql")  # skips locally, fails in CI
    initdb = found
    pg_ctl = str(Path(found).with_name("pg_ctl"))
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="clgate-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the postgres user
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    port = free_port()
    data = root / "data"
    log = root / "server.log"
    subprocess.run([*as_user, initdb, "-D", str(data), "-U", "clgate", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True, timeout=120)
    subprocess.run([*as_user, pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                   check=True, capture_output=True, timeout=120)
    try:
        yield f"postgresql+psycopg://clgate@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True,
                       timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)

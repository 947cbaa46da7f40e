"""`clgate serve --workers 2`: two API processes on one address, one store (SQLite, then a real PostgreSQL
server), Celery mode (a real redis-server; no Celery worker, so submitted jobs stay queued and only the
API is under test).

Each HTTP connection is held by one process; the test finds which one (the server side of the
connection's socket, in /proc) and talks to each process on purpose: a submission through one is read
through the other, a key revoked through one is refused at once by both, /metrics gives the same series
from both, and the schema was migrated once, by `clgate serve` itself.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.service import ADMIN_KEY, REPO, Proc, _wait, base_env, free_port

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _owner(server_port: int, client_port: int, candidates: set[int]) -> int | None:
    """Which of ``candidates`` holds the server side of the loopback connection from ``client_port``."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            inode = fields[9]
    if inode is None:
        return None
    for pid in candidates:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
        except OSError:
            continue
    return None


class Conn:
    """One kept-alive HTTP connection to the API (so to one of its processes)."""

    def __init__(self, port: int, key: str = ADMIN_KEY) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.key = key
        self.status, _ = self.call("GET", "/healthz")
        self.local_port = self.http.sock.getsockname()[1]

    def call(self, method: str, path: str, body: dict | bytes | None = None, key: str | None = None):
        headers = {"X-API-Key": key or self.key}
        if isinstance(body, dict):
            body, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        self.http.request(method, path, body=body, headers=headers)
        response = self.http.getresponse()
        data = response.read()
        ctype = response.getheader("content-type", "")
        return response.status, json.loads(data) if ctype.startswith("application/json") else data


@pytest.fixture(params=["sqlite", "postgresql"])
def two_processes(request, tmp_path, redis_url):
    """`clgate serve --workers 2` on a fresh store (a SQLite file, or a real PostgreSQL server): its Proc
    and port."""
    port = free_port()
    extra = {"CLGATE_BROKER_URL": redis_url}
    if request.param == "postgresql":
        extra["CLGATE_DATABASE_URL"] = request.getfixturevalue("postgres_url")
    env = base_env(tmp_path / "data", **extra)
    argv = [sys.executable, "-m", "clgate", "serve", "--port", str(port), "--workers", "2"]
    proc = Proc([*argv, "--log-level", "warning", "--no-access-log"], env, tmp_path / "serve.log")
    try:
        # both API processes are up (the parent supervises them) and one of them answers /readyz
        _wait(lambda: len(_children(proc.popen.pid)) >= 2, 90, "API processes", proc.popen, proc.log)
        _wait(lambda: Conn(port).call("GET", "/readyz")[0] == 200, 90, "API", proc.popen, proc.log)
        yield proc, port
    finally:
        proc.stop()


def _one_per_process(proc: Proc, port: int) -> dict[int, Conn]:
    """A connection held by each API process (new connections until both have one)."""
    pids = _children(proc.popen.pid)
    held: dict[int, Conn] = {}
    spare = []
    for _ in range(200):
        conn = Conn(port)
        owner = _owner(port, conn.local_port, pids)
        if owner is not None and owner not in held:
            held[owner] = conn
        else:
            spare.append(conn)  # kept open: the next connection is accepted while this one is held
        if len(held) == 2:
            break
    for conn in spare:
        conn.http.close()
    assert len(held) == 2, f"only {len(held)} of the 2 API processes accepted connections: {proc.tail()}"
    return held


@pytest.mark.slow
def test_two_api_processes_share_one_store(two_processes, example_log):
    proc, port = two_processes
    a, b = _one_per_process(proc, port).values()

    # the store is migrated once, by `clgate serve`, and each process reaches it
    log = proc.log.read_text()
    assert len(re.findall(r"migrated the record store", log)) == 1, log
    assert a.call("GET", "/readyz")[0] == 200 and b.call("GET", "/readyz")[0] == 200

    # what one process stores, the other serves: an artifact, a policy, a job
    status, artifact = a.call("POST", "/v1/artifacts?kind=log", example_log)
    assert status == 201, artifact
    policy = {"name": "two-procs", "version": "1", "rules": [{"metric": "acc", "floor": 0.0}]}
    assert b.call("POST", "/v1/policies", policy)[0] == 201
    job = {
        "mode": "metrics",
        "model_name": "two-procs",
        "logs": [artifact["ref"]],
        "policy": {"name": "two-procs", "version": "1"},
        "baseline": "none",
    }
    status, submitted = b.call("POST", "/v1/jobs", job)
    assert status == 202, submitted
    status, read = a.call("GET", f"/v1/jobs/{submitted['id']}")
    assert status == 200 and read["id"] == submitted["id"] and read["state"] == "queued", read
    assert a.call("GET", "/v1/jobs")[1]["count"] == b.call("GET", "/v1/jobs")[1]["count"] == 1

    # /metrics: the same series from either process (no process_* series, which would differ)
    names = []
    for conn in (a, b):
        status, text = conn.call("GET", "/metrics")
        assert status == 200
        names.append(
            sorted(
                {line.split("{")[0].split()[0] for line in text.decode().splitlines() if line[:1].isalnum()}
            )
        )
    assert names[0] == names[1] and "clgate_api_info" in names[0], names
    assert not [n for n in names[0] if n.startswith("process_")], names[0]


@pytest.mark.slow
def test_a_key_revoked_through_one_process_is_refused_by_both_at_once(two_processes):
    proc, port = two_processes
    a, b = _one_per_process(proc, port).values()
    status, created = a.call("POST", "/v1/keys", {"name": "short-lived", "role": "viewer"})
    assert status == 201, created
    key = created["key"]
    assert a.call("GET", "/v1/jobs", key=key)[0] == 200
    assert b.call("GET", "/v1/jobs", key=key)[0] == 200

    assert b.call("DELETE", f"/v1/keys/{created['id']}")[0] == 200
    for conn in (b, a):  # no grace period in either process: the next request is refused
        status, body = conn.call("GET", "/v1/jobs", key=key)
        assert status == 401 and "revoked" in body["reason"], body


def test_embedded_mode_refuses_several_processes(tmp_path):
    env = base_env(tmp_path / "data")
    r = subprocess.run(
        [sys.executable, "-m", "clgate", "serve", "--workers", "2", "--port", str(free_port())],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert "--workers > 1 needs CLGATE_BROKER_URL" in r.stderr and "Traceback" not in r.stderr


def _http(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    return {"type": "http", "method": method, "path": path, "headers": headers or []}


def test_writers_take_turns_in_arrival_order_and_reads_pass_them_by():
    """AdmissionLimit with one write slot: JSON submissions run one at a time, first come first served;
    a read and an upload do not wait for them; a body not yet read (not JSON) takes no write slot."""
    import asyncio

    from clgate.service.limits import AdmissionLimit, _writes

    json_post = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    assert _writes(_http("POST", "/v1/jobs", json_post))
    assert _writes(_http("DELETE", "/v1/keys/abc"))  # no body
    assert not _writes(_http("GET", "/v1/jobs/abc"))
    assert not _writes(_http("POST", "/v1/artifacts", [(b"content-length", b"9")]))
    assert not _writes(
        _http("POST", "/v1/jobs", [(b"content-type", b"text/plain"), (b"content-length", b"9")])
    )

    order: list[str] = []
    release = asyncio.Event()

    async def app(scope, receive, send):
        order.append(f"start {scope['path']}")
        if scope["method"] == "POST":
            await release.wait()
        order.append(f"end {scope['path']}")

    async def scenario() -> None:
        limit = AdmissionLimit(app, limit=8, write_limit=1)
        writes = []
        for i in range(3):
            writes.append(asyncio.create_task(limit(_http("POST", f"/w{i}", json_post), None, None)))
            await asyncio.sleep(0)  # arrival order w0, w1, w2
        await asyncio.sleep(0.01)
        await limit(_http("GET", "/r"), None, None)  # passes while w0 holds the only write slot
        assert order == ["start /w0", "start /r", "end /r"]
        release.set()
        await asyncio.wait_for(asyncio.gather(*writes), 5)

    asyncio.run(scenario())
    assert order[3:] == ["end /w0", "start /w1", "end /w1", "start /w2", "end /w2"]

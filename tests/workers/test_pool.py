"""Pre-started job children (clgate.workers.pool), with real bubblewrap processes.

A pooled child is confined exactly like a fresh one (the same probe, run inside the real child's entry
point, finds the same environment, file system, network, identity and limits both ways), runs one job
only (the next job's child finds nothing of the previous one's /tmp, output or inputs), is replaced
after use, is passed over when it died before its job, stops on cancel, and CLGATE_SANDBOX_POOL=0
starts none.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from clgate.store.db import session_scope
from clgate.store.models import Job
from clgate.workers import pool, runner, sandbox
from tests.workers.test_sandbox import (
    SECRET,
    UNCHECKED_CHILD,
    CopyOut,
    NeverReturns,
    _forged_setup,
    _job,
    _job_row,
    _nothing_leaked,
    _scripted,
    _store,
)

torch = pytest.importorskip("torch")

# The real child's entry point (limits, --wait handshake, stdout redirect) with its job replaced by a
# probe of what the process can see and do; what to look for comes in the staged args.json.
PROBE = r"""
import json, os, resource, socket, sys
import clgate.engine.child as child

def probe(stage, out, channel, threads):
    args = json.loads((stage / "args.json").read_text())
    found = {
        "env": sorted(os.environ), "root": sorted(os.listdir("/")), "uid": os.getuid(),
        "inputs": sorted(os.listdir(stage)), "out_before": sorted(os.listdir(out)),
        "tmp_before": sorted(os.listdir("/tmp")), "cwd": os.getcwd() == str(out),
    }
    try:
        socket.create_connection(("127.0.0.1", args["port"]), timeout=2)
        found["network"] = "connected"
    except OSError as exc:
        found["network"] = type(exc).__name__
    found["data"], found["store"] = os.path.exists(args["data"]), os.path.exists(args["store"])
    try:
        open(os.path.join(args["outside"], "planted"), "w").write("x")
        found["wrote_outside"] = True
    except OSError:
        found["wrote_outside"] = False
    try:
        open(os.path.join(stage, "planted"), "w").write("x")
        found["wrote_inputs"] = True
    except OSError:
        found["wrote_inputs"] = False
    found["limits"] = {
        n: resource.getrlimit(getattr(resource, "RLIMIT_" + n))[0] for n in ("AS", "FSIZE", "CPU", "NOFILE", "CORE")
    }
    open("/tmp/marker", "w").write("the previous job was here")
    (out / "probe.json").write_text(json.dumps(found))

child._run = probe
sys.exit(child.main(sys.argv[1:]))
"""  # noqa: E501 - embedded Python source


@pytest.fixture
def bwrap(require_binary):
    return require_binary("bwrap", "bubblewrap")


@pytest.fixture
def probe_env(tmp_path, bwrap, monkeypatch):
    """Settings (bwrap), a listening port, a folder outside the job, and the probe as the child."""
    settings, ctx = _store(tmp_path, sandbox="bwrap")
    monkeypatch.setenv("CLGATE_DATABASE_URL", "postgresql://clgate:hunter2@db/clgate")
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", ["-c", PROBE])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    outside = tmp_path / "outside"
    outside.mkdir()
    args = {
        "port": listener.getsockname()[1],
        "outside": str(outside),
        "data": str(settings.data_dir.resolve()),
        "store": str(ctx.settings.artifact_dir.resolve()),
    }
    yield settings, args
    listener.close()


@pytest.fixture
def children(monkeypatch):
    """Make a pool for ``settings`` (CPU children, whatever this machine has) as this process's pool."""
    made: list[pool.SandboxPool] = []

    def make(settings, size: int = 1) -> pool.SandboxPool:
        started = pool.SandboxPool(settings, "bwrap", size, gpu=False)
        monkeypatch.setattr(pool, "_POOL", started)
        made.append(started)
        started.refill()
        return started

    yield make
    for started in made:
        started.shutdown()


def _launch(tmp_path: Path, name: str, args: dict, extra_file: str):
    from clgate.engine.runner import ChildLaunch

    work = tmp_path / "data" / "jobs" / name  # where a worker stages: the pool's file system
    stage, out = work / "stage", work / "out"
    stage.mkdir(parents=True)
    out.mkdir()
    (stage / "args.json").write_text(json.dumps(args))
    (stage / extra_file).write_bytes(b"staged")
    return ChildLaunch(stage, out, threads=4, gpu=False)


def _probe(launcher: sandbox.SandboxLauncher, launch) -> dict:
    proc = launcher(launch)
    proc.communicate(timeout=120)
    return json.loads((launch.out / "probe.json").read_text())


def test_a_pooled_child_is_confined_exactly_like_a_fresh_one(tmp_path, probe_env, children):
    settings, args = probe_env
    fresh = _probe(
        sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False),
        _launch(tmp_path, "fresh", args, "fresh.npy"),
    )
    started = children(settings)
    launcher = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False, pool=started)
    pooled = _probe(launcher, _launch(tmp_path, "pooled", args, "pooled.npy"))
    assert launcher.pooled and started.taken == 1
    assert pooled["network"] != "connected"
    assert not any(name.startswith("CLGATE") for name in pooled["env"]), pooled["env"]
    assert pooled["data"] is False and pooled["store"] is False
    assert pooled["wrote_outside"] is False and pooled["wrote_inputs"] is False
    assert "job" in pooled["root"] and pooled["uid"] == 65534
    limits = pooled["limits"]
    assert limits["AS"] == settings.sandbox_memory_bytes
    assert limits["FSIZE"] == settings.sandbox_max_file_bytes
    assert limits["CPU"] == settings.job_time_limit_s * settings.sandbox_cpu_threads and limits["CORE"] == 0
    assert pooled["inputs"] == ["args.json", "pooled.npy"] and pooled["cwd"] is True
    fresh["inputs"] = pooled["inputs"]  # each saw its own staged file
    for found in (fresh, pooled):  # torch's own cache folder appears in /tmp once torch is loaded
        found["tmp_before"] = [name for name in found["tmp_before"] if not name.startswith("torchinductor")]
    assert pooled == fresh


def test_a_pooled_child_runs_one_job_and_a_fresh_one_serves_the_next(tmp_path, probe_env, children):
    settings, args = probe_env
    started = children(settings)
    launcher = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False, pool=started)
    first_launch = _launch(tmp_path, "first", args, "first.npy")
    first = launcher(first_launch)
    # taken, never handed out again; its replacement starts at once
    assert len(started.waiting) == 1 and started.waiting[0].proc.pid != first.pid
    replacement = started.waiting[0]
    assert replacement.proc.poll() is None and replacement.slot.is_dir()
    first.communicate(timeout=120)
    assert first.returncode == 0
    started.refill()  # nothing missing: nothing more started
    assert started.waiting == [replacement]
    second_launcher = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False, pool=started)
    second = _probe(second_launcher, _launch(tmp_path, "second", args, "second.npy"))
    assert second_launcher.pooled and started.taken == 2
    assert "marker" not in second["tmp_before"]  # the first job's /tmp/marker went with its process
    assert second["inputs"] == ["args.json", "second.npy"] and second["out_before"] == []
    assert "marker" not in json.loads((first_launch.out / "probe.json").read_text())["tmp_before"]


def test_a_pooled_child_that_died_before_its_job_is_replaced_by_a_fresh_one(tmp_path, probe_env, children):
    settings, args = probe_env
    started = children(settings)
    dead = started.waiting[0]
    os.killpg(dead.proc.pid, signal.SIGKILL)
    dead.proc.wait(timeout=30)
    launcher = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False, pool=started)
    found = _probe(launcher, _launch(tmp_path, "after-crash", args, "x.npy"))
    assert not launcher.pooled and started.taken == 0  # a fresh child ran the job
    assert found["inputs"] == ["args.json", "x.npy"] and found["uid"] == 65534
    assert not dead.slot.exists()  # the dead child's folders are removed
    started.refill()
    assert len(started.waiting) == 1 and started.waiting[0].proc.poll() is None


def test_a_job_that_needs_another_child_gets_a_fresh_one_and_the_pool_follows(tmp_path, probe_env, children):
    settings, args = probe_env
    started = children(settings)
    launch = _launch(tmp_path, "two-threads", args, "x.npy")
    launch = type(launch)(launch.stage, launch.out, threads=2, gpu=False)
    launcher = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False, pool=started)
    _probe(launcher, launch)
    assert not launcher.pooled
    started.refill()
    assert started.waiting[0].threads == 2  # made like the last job's
    assert started.waiting[0].proc.args[started.waiting[0].proc.args.index("--threads") + 1] == "2"


def test_no_pool_when_its_size_is_zero(tmp_path, bwrap):
    settings, _ = _store(tmp_path, sandbox="bwrap", sandbox_pool=0)
    assert pool.start(settings) is None and pool.current(settings) is None
    assert not (settings.jobs_dir / pool.POOL_FOLDER).exists() or not any(
        (settings.jobs_dir / pool.POOL_FOLDER).iterdir()
    )


def test_the_pool_starts_nothing_where_jobs_cannot_run(tmp_path):
    settings, _ = _store(tmp_path, sandbox="none")  # no sandbox, unconfined not allowed
    assert pool.start(settings) is None


def test_a_hostile_model_in_a_pooled_child_leaks_nothing(tmp_path, bwrap, monkeypatch, children):
    settings, ctx = _store(tmp_path, sandbox="bwrap")
    started = children(settings)
    key, destination, forged = _forged_setup(tmp_path, ctx, "store")
    job_id = _job(ctx, _scripted(CopyOut(str(key), str(destination), len(SECRET))))
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", UNCHECKED_CHILD)
    started.shutdown()  # its children were started with the checked command: start them again
    started.refill()
    assert runner.execute_job(job_id, settings) == "failed"
    assert started.taken == 1
    error = _job_row(ctx, job_id).error
    assert "No such file" in error or "cannot take inputs" in error, error
    assert str(tmp_path) not in error
    _nothing_leaked(ctx, job_id, destination)
    assert not ctx.artifacts.exists(forged)
    assert len(started.waiting) == 1  # replaced when the job took its child


def test_a_pooled_child_is_killed_on_cancel(tmp_path, bwrap, children):
    settings, ctx = _store(tmp_path)
    started = children(settings)
    job_id = _job(ctx, _scripted(NeverReturns()))
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(runner.execute_job(job_id, settings)), daemon=True)
    thread.start()
    for _ in range(600):
        if started.taken and _job_row(ctx, job_id).state == "running":
            break
        time.sleep(0.1)
    time.sleep(1.0)
    with session_scope(ctx.sessions) as s:
        s.get(Job, job_id).cancel_requested = True
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert result == ["cancelled"] and started.taken == 1


def test_an_embedded_worker_process_starts_its_waiting_children(tmp_path, bwrap):
    """The executor's process initializer starts this process's pool (and a job then takes from it);
    with CLGATE_SANDBOX_POOL=0 it starts none, as before."""
    from clgate.workers import embedded

    settings, _ = _store(tmp_path, sandbox="bwrap")
    try:
        embedded._init_process(os.getppid(), settings.model_dump_json())
        started = pool.current(settings)
        assert started is not None and len(started.waiting) == settings.sandbox_pool == 1
        assert started.waiting[0].proc.poll() is None and "--wait" in started.waiting[0].proc.args
    finally:
        pool.stop()
    assert not any((settings.jobs_dir / pool.POOL_FOLDER).iterdir())  # its folders went with it
    off = settings.model_copy(update={"sandbox_pool": 0})
    embedded._init_process(os.getppid(), off.model_dump_json())
    assert pool.current(off) is None

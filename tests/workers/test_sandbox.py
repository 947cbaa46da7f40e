"""Confined execution, with real processes: a job's model runs in a bubblewrap child that sees only its job.

A hostile TorchScript model copies a key file out of the data folder (into a plain file outside its job,
and into the artifact store under a forged hash). The operator allowlist refuses it at load; with the
allowlist switched off inside the child (a test-only wrapper command), the sandbox still leaks nothing,
and the same model run unconfined does leak (so the test can tell). A forward that never returns is
killed within the grace period after a cancel or the time limit.
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from clgate.store import Store
from clgate.store.db import session_scope, upgrade
from clgate.store.models import Artifact, Job, Policy
from clgate.store.settings import Settings
from clgate.workers import runner, sandbox

torch = pytest.importorskip("torch")

SECRET = b"clg_secret_admin_key_0123456789abcdef"
POLICY = {"name": "p", "rules": [{"metric": "acc", "floor": 0.0}]}
# the child as a wrapper that disables the TorchScript operator check, then runs the real child
UNCHECKED_CHILD = [
    "-c",
    (
        "import sys; import clgate.engine.modelfile.torchscript as m; "
        "m.check_torchscript_archive = lambda path: None; m.check_torchscript_ops = lambda module, "
        "source: None; "
        "from clgate.engine.child import main; sys.argv[0] = 'child'; sys.exit(main(sys.argv[1:]))"
    ),
]


@pytest.fixture
def bwrap(require_binary):
    return require_binary("bwrap", "bubblewrap")


def _store(tmp_path: Path, **overrides) -> tuple[Settings, Store]:
    settings = Settings(data_dir=tmp_path / "data", sandbox_kill_grace_s=1.0, **overrides)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.resolved_database_url())
    return settings, runner.store_for(settings)


def _npz() -> bytes:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((80, 8), dtype=np.float32)
    y = np.repeat(np.arange(4), 20)
    buf = io.BytesIO()
    np.savez(buf, x_train=x, y_train=y, x_test=x[::2], y_test=y[::2])
    return buf.getvalue()


def _upload(ctx: Store, data: bytes, filename: str) -> str:
    stored = ctx.artifacts.put_bytes(data)
    with session_scope(ctx.sessions) as s:
        if s.get(Artifact, stored.sha256) is None:
            s.add(Artifact(sha256=stored.sha256, size=stored.size, kind="other", filename=filename))
    return stored.sha256


def _scripted(module: torch.nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buf)
    return buf.getvalue()


class CopyOut(torch.nn.Module):
    """forward() copies ``source`` (a file outside its job) into ``target`` (anywhere), then classifies."""

    def __init__(self, source: str, target: str, size: int) -> None:
        super().__init__()
        self.source, self.target, self.size = source, target, size
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stolen = torch.from_file(self.source, shared=False, size=self.size, dtype=torch.uint8)
        planted = torch.from_file(self.target, shared=True, size=self.size, dtype=torch.uint8)
        planted.copy_(stolen)
        return self.lin(x) + planted.sum().float() * 0.0  # used, so that TorchScript keeps the file ops


class NeverReturns(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        while bool(y.sum() > -1.0):
            y = y * 1.0
        return self.lin(y)


def _job(ctx: Store, model: bytes, **spec_changes) -> str:
    data_ref = _upload(ctx, _npz(), "data.npz")
    model_ref = _upload(ctx, model, "model.pt")
    spec = {
        "data": {"kind": "npz", "path": {"artifact": f"sha256:{data_ref}"}},
        "scenario": {"n_tasks": 2},
        "model": {"torchscript": {"artifact": f"sha256:{model_ref}"}},
        "strategy": {"name": "finetune"},
        "training": {"iterations": 4, "batch_size": 8},
        "evaluation": {"eval_every": 2},
        "seeds": [0],
        "device": "cpu",
        **spec_changes,
    }
    with session_scope(ctx.sessions) as s:
        p = Policy(name="p", version="1", document=POLICY, sha256="0" * 64)
        s.add(p)
        s.flush()
        job = Job(mode="retrain", queue="cpu", model_name="m", spec=spec, policy_id=p.id, progress={})
        s.add(job)
        s.flush()
        return job.id


def _job_row(ctx: Store, job_id: str) -> Job:
    with ctx.sessions() as s:
        return s.get(Job, job_id)


def _forged_setup(tmp_path: Path, ctx: Store, target: str) -> tuple[Path, Path, str]:
    """The key file in the data folder, and where the model tries to put it."""
    key = ctx.settings.data_dir / "admin.key"
    key.write_bytes(SECRET)
    forged_digest = hashlib.sha256(b"what the attacker uploads next").hexdigest()
    destination = (
        ctx.artifacts.path(forged_digest) if target == "store" else tmp_path / "outside" / "stolen.bin"
    )
    destination.parent.mkdir(parents=True, exist_ok=True)
    return key, destination, forged_digest


def _nothing_leaked(ctx: Store, job_id: str, destination: Path) -> None:
    assert not destination.exists()
    row = _job_row(ctx, job_id)
    assert SECRET.decode() not in (row.error or "") + json.dumps(row.progress or {})
    for path in ctx.settings.artifact_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_bytes(), path
            if "sha256" in path.parts:
                assert (
                    hashlib.sha256(path.read_bytes()).hexdigest() == path.name
                )  # the store holds only true names


def test_the_operator_allowlist_refuses_a_file_reading_model(tmp_path, bwrap):
    settings, ctx = _store(tmp_path)
    key, destination, _ = _forged_setup(tmp_path, ctx, "outside")
    job_id = _job(ctx, _scripted(CopyOut(str(key), str(destination), len(SECRET))))
    assert runner.execute_job(job_id, settings) == "failed"
    error = _job_row(ctx, job_id).error
    assert error.startswith("invalid input") and "aten::from_file" in error
    assert str(tmp_path) not in error  # job-relative paths only
    _nothing_leaked(ctx, job_id, destination)


@pytest.mark.parametrize("target", ["outside", "store"])
def test_the_sandbox_confines_a_model_that_passed_no_check(tmp_path, bwrap, monkeypatch, target):
    settings, ctx = _store(tmp_path, sandbox="bwrap")
    key, destination, forged = _forged_setup(tmp_path, ctx, target)
    job_id = _job(ctx, _scripted(CopyOut(str(key), str(destination), len(SECRET))))
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", UNCHECKED_CHILD)
    assert runner.execute_job(job_id, settings) == "failed"
    error = _job_row(ctx, job_id).error
    assert "from_file" not in error or "refused" not in error  # the check really was off
    assert "No such file" in error or "cannot take inputs" in error, error
    assert str(tmp_path) not in error and str(settings.data_dir.resolve()) not in error
    _nothing_leaked(ctx, job_id, destination)
    assert not ctx.artifacts.exists(forged)


def test_the_same_model_unconfined_does_leak(tmp_path, monkeypatch):
    """The control: without the sandbox the attack works, so the tests above can fail."""
    settings, ctx = _store(tmp_path, sandbox="none", allow_unconfined=True)
    key, destination, _ = _forged_setup(tmp_path, ctx, "outside")
    job_id = _job(ctx, _scripted(CopyOut(str(key), str(destination), len(SECRET))))
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", UNCHECKED_CHILD)
    runner.execute_job(job_id, settings)
    assert destination.read_bytes() == SECRET


def test_no_sandbox_and_unconfined_not_allowed_refuses_the_job(tmp_path):
    settings, ctx = _store(tmp_path, sandbox="none")
    job_id = _job(ctx, _scripted(NeverReturns()))
    assert runner.execute_job(job_id, settings) == "failed"
    assert "CLGATE_ALLOW_UNCONFINED is false" in _job_row(ctx, job_id).error


def _run_in_thread(settings: Settings, job_id: str) -> tuple[threading.Thread, list[str]]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(runner.execute_job(job_id, settings)), daemon=True)
    thread.start()
    return thread, result


def test_a_forward_that_never_returns_is_killed_after_cancel(tmp_path, bwrap):
    settings, ctx = _store(tmp_path)
    job_id = _job(ctx, _scripted(NeverReturns()))
    thread, result = _run_in_thread(settings, job_id)
    for _ in range(600):  # the child has started once its output folder exists
        if (
            list(settings.jobs_dir.glob(f"{job_id}/attempt-1/*/out"))
            and _job_row(ctx, job_id).state == "running"
        ):
            break
        time.sleep(0.1)
    time.sleep(1.0)
    with session_scope(ctx.sessions) as s:
        s.get(Job, job_id).cancel_requested = True
    thread.join(timeout=60)  # without a kill the forward would spin for ever
    assert not thread.is_alive()
    assert result == ["cancelled"]
    assert _job_row(ctx, job_id).error == "cancelled while running (no usable partial log)"


def test_a_forward_that_never_returns_is_killed_at_the_time_limit(tmp_path, bwrap):
    settings, ctx = _store(tmp_path, job_soft_time_limit_s=2, job_time_limit_s=30)
    job_id = _job(ctx, _scripted(NeverReturns()))
    thread, result = _run_in_thread(settings, job_id)
    thread.join(timeout=90)
    assert not thread.is_alive()
    assert result == ["failed"]
    assert _job_row(ctx, job_id).error.startswith("time limit exceeded")


PROBE = r"""
import json, os, socket, sys
out = sys.argv[2]
found = {"env": sorted(os.environ), "root": sorted(os.listdir("/")), "uid": os.getuid()}
try:
    socket.create_connection(("127.0.0.1", int(os.environ.get("PROBE_PORT", sys.argv[-1]))), timeout=2)
    found["network"] = "connected"
except OSError as exc:
    found["network"] = type(exc).__name__
for name in ("data", "store"):
    path = sys.argv[-2 if name == "data" else -3]
    found[name] = os.path.exists(path)
try:
    open(os.path.join(sys.argv[-4], "planted"), "w").write("x")
    found["wrote_outside"] = True
except OSError:
    found["wrote_outside"] = False
open(os.path.join(out, "probe.json"), "w").write(json.dumps(found))
"""


def _launch(tmp_path: Path):
    from clgate.engine.runner import ChildLaunch

    stage, out = tmp_path / "stage", tmp_path / "out"
    stage.mkdir()
    out.mkdir()
    return ChildLaunch(stage, out, threads=1, gpu=False)


def test_the_child_sees_no_network_credentials_store_or_data(tmp_path, bwrap, monkeypatch):
    settings, ctx = _store(tmp_path, sandbox="bwrap")
    monkeypatch.setenv("CLGATE_DATABASE_URL", "postgresql://clgate:hunter2@db/clgate")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    outside = tmp_path / "outside"
    outside.mkdir()
    launch = _launch(tmp_path)
    extra = [
        str(outside),
        str(ctx.settings.artifact_dir.resolve()),
        str(settings.data_dir.resolve()),
        str(port),
    ]
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", ["-c", PROBE])
    real_argv = sandbox.child_argv

    def with_probe_args(*a, **k):
        argv, env = real_argv(*a, **k)
        return argv + extra, env

    monkeypatch.setattr(sandbox, "child_argv", with_probe_args)
    try:
        proc = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False)(launch)
        proc.communicate(timeout=60)
    finally:
        listener.close()
    found = json.loads((launch.out / "probe.json").read_text())
    assert found["network"] != "connected"
    assert not any(name.startswith("CLGATE") for name in found["env"]), found["env"]
    assert found["data"] is False and found["store"] is False
    assert found["wrote_outside"] is False and not (outside / "planted").exists()
    assert "job" in found["root"] and found["uid"] == 65534  # its own root, as nobody


FLOOD = r"""
import os, sys, time
out = sys.argv[2]
for i in range(12):
    with open(os.path.join(out, f"junk{i}"), "wb") as f:
        f.write(b"x" * (1 << 20))
time.sleep(600)
"""


def test_a_child_that_floods_its_output_folder_is_killed(tmp_path, bwrap, monkeypatch):
    settings, _ = _store(tmp_path, sandbox="bwrap", sandbox_max_file_bytes=2 << 20)
    launcher = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False)
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", ["-c", FLOOD])
    proc = launcher(_launch(tmp_path))
    for _ in range(600):
        launcher.check()
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    assert launcher.overflow and proc.returncode is not None


CHECKOUT_PROBE = r"""
import json, os, sys
out = sys.argv[2]
root = sys.argv[-1]
import clgate.schemas, clgate.workers
seen = {name: os.path.exists(os.path.join(root, name)) for name in ("README.md", ".git", "pyproject.toml", "clgate")}
open(os.path.join(out, "checkout.json"), "w").write(json.dumps(seen))
"""  # noqa: E501 - embedded Python source


@pytest.mark.parametrize("layout", ["as-installed", "prefix-holds-the-checkout"])
def test_the_child_sees_the_package_never_the_source_checkout(tmp_path, bwrap, monkeypatch, layout):
    checkout = sandbox._checkout()
    if checkout is None or not (checkout / "README.md").is_file():
        pytest.skip("clgate is installed, not run from a checkout")
    if layout == "prefix-holds-the-checkout":  # e.g. a virtual environment made around the checkout
        paths = sandbox._python_paths()
        monkeypatch.setattr(sandbox, "_python_paths", lambda: sorted({*paths, checkout.parent}))
    settings, _ = _store(tmp_path, sandbox="bwrap")
    launch = _launch(tmp_path)
    monkeypatch.setattr(sandbox, "CHILD_COMMAND", ["-c", CHECKOUT_PROBE])
    real_argv = sandbox.child_argv

    def with_checkout_arg(*a, **k):
        argv, env = real_argv(*a, **k)
        return [*argv, str(checkout)], env

    monkeypatch.setattr(sandbox, "child_argv", with_checkout_arg)
    proc = sandbox.SandboxLauncher(settings, "bwrap", tmp_path, gpu=False)(launch)
    proc.communicate(timeout=60)
    seen = json.loads((launch.out / "checkout.json").read_text())
    assert seen == {"README.md": False, ".git": False, "pyproject.toml": False, "clgate": True}, seen


def test_the_child_logs_tail_is_read_whatever_its_size(tmp_path):
    """The child may print up to CLGATE_SANDBOX_MAX_FILE_BYTES (configurable, above 1 GiB too): the tail
    the worker logs is the file's last bytes, read alone (the file here is sparse: nothing is allocated)."""
    staged = sandbox.Staged(tmp_path / "work")
    log = staged.work / "child.log"
    with open(log, "wb") as f:
        f.truncate(3 << 29)  # 1.5 GiB
        f.seek(0, 2)
        f.write(b"Traceback ...\nValueError: the last words")
    assert sandbox.child_log_tail(staged, limit=30) == "...\nValueError: the last words"[-30:]
    assert sandbox.child_log_tail(staged).endswith("ValueError: the last words")
    (staged.work / "elsewhere.log").write_text("secret")
    log.unlink()
    log.symlink_to(staged.work / "elsewhere.log")  # a link the child left: not followed
    assert sandbox.child_log_tail(staged) == ""


# ---------------------------------------------------------------------- size limits of a hostile child
# Each wraps the real child: the job is honest but for one thing the child does past a size limit.
LIMIT = 256 << 10  # CLGATE_SANDBOX_MAX_FILE_BYTES in these tests
_WRAP = (
    "import os, sys\nimport clgate.engine.child as child\n"
    "real_run, real_send = child._run, child.PipeChannel.send\n"
)
_RUN = "sys.exit(child.main(sys.argv[1:]))\n"


def _wrapped(body: str) -> str:
    """The real child (``real_run``, ``real_send`` at hand) with ``body`` run before it starts."""
    return _WRAP + body + _RUN


FLOODS_STDERR = _wrapped(
    "def run(*args):\n"
    "    for _ in range(64):  # 4 MiB in all\n"
    "        try:\n"
    "            os.write(2, b'x' * 65536)\n"
    "        except OSError:  # EFBIG past RLIMIT_FSIZE: carry on regardless\n"
    "            pass\n"
    "    return real_run(*args)\n"
    "child._run = run\n"
)
OVERSIZED_MESSAGE = _wrapped(
    "def send(self, header, payload=None):\n"
    "    if header.get('type') == 'seed_start':\n"
    f"        header = {{**header, 'meta': {{'padding': 'x' * {2 * LIMIT}}}}}\n"
    "    real_send(self, header, payload)\n"
    "child.PipeChannel.send = send\n"
)
ENDLESS_POINTS = _wrapped(
    "def send(self, header, payload=None):\n"
    "    real_send(self, header, payload)\n"
    "    if header.get('type') == 'point' and not header['task_end'] and header['iteration'] > 0:\n"
    "        for k in range(2, 20000):  # valid points, each after the last: more than a log may hold\n"
    "            real_send(self, {**header, 'iteration': header['iteration'] * k}, payload)\n"
    "child.PipeChannel.send = send\n"
)
OVERSIZED_FILE = _wrapped(
    "def run(stage, out, *rest):\n"
    "    try:\n"
    "        with open(os.path.join(out, 'big.bin'), 'wb') as f:\n"
    f"            f.write(b'x' * {2 * LIMIT})\n"
    "    except OSError:  # EFBIG past RLIMIT_FSIZE: carry on regardless\n"
    "        pass\n"
    "    return real_run(stage, out, *rest)\n"
    "child._run = run\n"
)


class Honest(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


@pytest.mark.parametrize(
    ("child", "expected"),
    [
        pytest.param(None, None, id="honest"),
        pytest.param(FLOODS_STDERR, "bytes to its standard error", id="stderr"),
        pytest.param(OVERSIZED_MESSAGE, "a message header of", id="message"),
        pytest.param(ENDLESS_POINTS, "the evaluation log would exceed", id="log"),
        pytest.param(OVERSIZED_FILE, "into 'big.bin' in its output folder", id="file"),
    ],
)
def test_a_child_past_a_size_limit_fails_its_job_naming_the_limit(
    tmp_path, bwrap, monkeypatch, child, expected
):
    settings, ctx = _store(tmp_path, sandbox="bwrap", sandbox_max_file_bytes=LIMIT)
    job_id = _job(ctx, _scripted(Honest()))
    if child is not None:
        monkeypatch.setattr(sandbox, "CHILD_COMMAND", ["-c", child])
    state = runner.execute_job(job_id, settings)
    error = _job_row(ctx, job_id).error
    child_log = settings.jobs_dir / job_id / "attempt-1" / "child.log"
    assert child_log.stat().st_size <= LIMIT  # the worker's copy of the child's prints is bounded
    if expected is None:  # the control: the same job under the same small limit passes
        assert state == "succeeded", error
        return
    assert state == "failed"
    assert expected in error and "CLGATE_SANDBOX_MAX_FILE_BYTES" in error, error
    assert str(tmp_path) not in error
    if child is FLOODS_STDERR:
        assert child_log.stat().st_size == LIMIT  # cut exactly there
    if child is ENDLESS_POINTS:  # the points that fit are kept, as a partial log
        kept = json.loads((settings.jobs_dir / job_id / "attempt-1" / "logs" / "log-seed0.json").read_text())
        assert kept["partial"] is True and len(kept["points"]) > 1000
    for log in (settings.jobs_dir / job_id / "attempt-1" / "logs").glob("*.json"):
        assert log.stat().st_size <= LIMIT + 1024  # a partial log, bounded (counted as compact JSON)

"""Confined execution: each job attempt's engine runs in a child process that sees only that job.

The trusted side (this module, called by :func:`clgate.workers.runner._run_engine`) copies the job's
inputs into ``<attempt>/inputs`` (verified against their hashes), writes the spec beside them, and starts
``python -m clgate.workers.sandbox_child`` (:mod:`clgate.workers.sandbox_child`):

- ``bwrap`` (bubblewrap, ``CLGATE_SANDBOX=bwrap`` or ``auto`` when it works): new user, PID, network,
  IPC, UTS and cgroup namespaces (``--unshare-all``: no network at all), no capabilities, no new user
  namespaces, ``--die-with-parent``, ``--new-session``, a cleared environment, a fresh ``/tmp``; the
  filesystem holds only the system libraries, the Python installation and clgate's packages (read-only),
  the inputs at ``/job/inputs`` (read-only), the control folder at ``/job/control`` (read-only) and the
  output folder at ``/job/out`` (the only writable place). The data folder — database, artifact store,
  key files — is not there; it is hidden under an empty tmpfs if it lies inside a bound folder.
- ``none`` (only with ``CLGATE_ALLOW_UNCONFINED=true``): the same child and limits without the
  namespaces; the service warns at start and ``/readyz`` reports ``sandbox: unconfined``.

Limits in both: address space (``CLGATE_SANDBOX_MEMORY_BYTES``), file size
(``CLGATE_SANDBOX_MAX_FILE_BYTES``),
CPU threads (``CLGATE_SANDBOX_CPU_THREADS``), CPU time (the hard time limit × threads), open files, no core
dumps, and wall time: at the soft time limit or on cancel the child is asked to stop (``control/stop``)
and is killed ``CLGATE_SANDBOX_KILL_GRACE_S`` later (SIGTERM, then SIGKILL).

Nothing the child writes is trusted: files are opened without following links, sizes are bounded, logs
are validated against their schema by the caller, and the error it reports is shortened and stripped of
paths. Metrics, decision and reports are computed by the trusted side.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from clgate.store.settings import Settings

log = logging.getLogger("clgate.sandbox")

Mode = Literal["bwrap", "none"]
SANDBOX_ROOT = Path("/job")
CONTROL_FILES_MAX_BYTES = 64 * 1024
POLL_S = 0.2
TMP_BYTES = 64 * 1024 * 1024  # the child's /tmp (a tmpfs, where bwrap can size it)
TERM_TO_KILL_S = 2.0
# What the child's environment may hold (everything else is cleared: no keys, URLs or credentials).
ENV_ALLOWLIST = ("LANG", "LC_ALL", "TZ")


class SandboxUnavailable(RuntimeError):
    """No sandbox can run here and running unconfined is not allowed."""


@dataclass(frozen=True)
class SandboxStatus:
    """What :func:`sandbox_status` found: the mode jobs will run in, or why they cannot run."""

    mode: Mode | None  # None: jobs that run submitted code are refused
    detail: str

    @property
    def confined(self) -> bool:
        return self.mode == "bwrap"


@functools.lru_cache(maxsize=8)
def _bwrap_options(binary: str) -> frozenset[str]:
    """The newer options this ``bwrap`` knows (``--disable-userns`` 0.8+, ``--size``, ``--clearenv`` …)."""
    try:
        text = subprocess.run([binary, "--help"], capture_output=True, timeout=30, env={}, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    wanted = ("--disable-userns", "--size", "--clearenv")
    return frozenset(o for o in wanted if o.encode() in text)


def _bwrap_base(binary: str) -> list[str]:
    """The namespace, identity and session options of every sandbox (optional ones where supported)."""
    options = _bwrap_options(binary)
    argv = [binary, "--unshare-all", "--unshare-user"]
    if "--disable-userns" in options:
        argv.append("--disable-userns")
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534"]
    if "--clearenv" in options:  # bwrap itself is started with an empty environment in any case
        argv.append("--clearenv")
    return argv


@functools.lru_cache(maxsize=8)
def _bwrap_works(binary: str) -> str | None:
    """``None`` when ``bwrap`` can create the namespaces here, else why not (probed once per process)."""
    try:
        proc = subprocess.run(
            [*_bwrap_base(binary), "--ro-bind", "/", "/", "--tmpfs", "/tmp", "true"],
            capture_output=True,
            timeout=30,
            env={},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{binary} cannot start ({exc})"
    if proc.returncode != 0:
        return f"{binary} cannot create namespaces here: {proc.stderr.decode(errors='replace').strip()[:300]}"
    return None


def sandbox_status(settings: Settings) -> SandboxStatus:
    """Which confinement ``settings`` give on this machine (``CLGATE_SANDBOX``,
    ``CLGATE_ALLOW_UNCONFINED``)."""
    if settings.sandbox in ("auto", "bwrap"):
        binary = shutil.which("bwrap")
        problem = "bwrap not found (Debian package bubblewrap)" if binary is None else _bwrap_works(binary)
        if problem is None:
            return SandboxStatus("bwrap", "bwrap")
        if settings.sandbox == "bwrap":
            return SandboxStatus(None, f"CLGATE_SANDBOX=bwrap but {problem}")
    else:
        problem = "CLGATE_SANDBOX=none"
    if settings.allow_unconfined:
        return SandboxStatus("none", f"unconfined ({problem}; CLGATE_ALLOW_UNCONFINED=true)")
    return SandboxStatus(None, f"no sandbox ({problem}) and CLGATE_ALLOW_UNCONFINED is false")


def announcement(status: SandboxStatus) -> str | None:
    """What ``clgate serve``, ``clgate worker``, the log and ``/readyz`` say when submitted models would
    run unconfined (``CLGATE_ALLOW_UNCONFINED=true``) or not at all; ``None`` under bwrap."""
    if status.mode is None:
        return (
            f"SANDBOX UNAVAILABLE: {status.detail}; jobs that run submitted models will fail. Install "
            "bubblewrap (and allow user namespaces), or on a laptop only set CLGATE_ALLOW_UNCONFINED=true"
        )
    if status.mode == "none":
        return (
            f"SUBMITTED MODELS RUN UNCONFINED: {status.detail}. CLGATE_ALLOW_UNCONFINED=true is a "
            "laptop-only escape hatch: a model can read and write every file this process can, including "
            "the database, the artifact store and key files. Never use it in a shared deployment"
        )
    return None


def warn_if_unconfined(settings: Settings) -> SandboxStatus:
    """Log loudly at start when submitted models would run unconfined or not at all."""
    status = sandbox_status(settings)
    message = announcement(status)
    if message is None:
        log.info("job sandbox: %s", status.detail)
    else:
        log.warning("%s", message)
    return status


# ---------------------------------------------------------------------- staging
@dataclass
class Staged:
    """A job attempt's folders: ``inputs`` (copies + spec.json), ``control`` (stop flag), ``out``."""

    work: Path
    inputs: Path = field(init=False)
    control: Path = field(init=False)
    out: Path = field(init=False)

    def __post_init__(self) -> None:
        self.work = self.work.resolve()  # bwrap binds need absolute paths
        self.inputs, self.control, self.out = self.work / "inputs", self.work / "control", self.work / "out"
        for folder in (self.inputs, self.control, self.out):
            folder.mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------------- the child
@dataclass(frozen=True)
class ChildResult:
    """How the child ended: ``stopped`` ("cancel", "timeout" or None), its exit code, what it reported."""

    stopped: Literal["cancel", "timeout"] | None
    returncode: int | None
    killed: bool
    report: dict[str, Any] | None  # result.json or error.json, parsed and bounded
    log_paths: list[Path]
    overflow: bool = False  # killed for writing more than OUTPUT_FILES_FACTOR × the file-size limit in all


# The output folder may hold this many times CLGATE_SANDBOX_MAX_FILE_BYTES in all (checked every few seconds).
OUTPUT_FILES_FACTOR = 4
SIZE_CHECK_EVERY_S = 2.0


def tree_size(folder: Path) -> int:
    """Bytes in the regular files under ``folder`` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def _python_paths() -> list[Path]:
    """Folders the child needs read-only to run Python and import clgate and its dependencies."""
    import clgate
    import clgate.schemas
    import clgate.workers

    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix)}
    for module in (clgate, clgate.schemas, clgate.workers):  # the child imports nothing of the API
        paths.add(Path(module.__file__).resolve().parent)
    try:  # the shipped examples (package data): the child may read a bundled spec or log
        import clgate.examples

        paths.update(Path(p).resolve() for p in clgate.examples.__path__)
    except ImportError:
        pass
    for entry in sys.path:  # site-packages and editable-install roots of the running interpreter
        if entry and Path(entry).is_dir() and "site-packages" in entry:
            paths.add(Path(entry).resolve())
    exe = Path(sys.executable)
    paths.add(exe.parent)
    paths.add(exe.resolve().parent)
    return sorted(paths)


def _checkout() -> Path | None:
    """The source checkout clgate runs from on an editable install (the folder holding ``clgate/``,
    ``schemas/`` …, README.md and .git), or ``None`` for an installed package."""
    import clgate

    root = Path(clgate.__file__).resolve().parent.parent
    return None if "site-packages" in root.parts or "dist-packages" in root.parts else root


def _python_binds(paths: list[Path], checkout: Path | None) -> tuple[list[Path], list[str]]:
    """``(folders bound, bwrap arguments)``: ``paths`` bound read-only (none twice, nothing under /usr,
    which is bound whole). A source checkout is never visible whole: where a bound folder holds it (a
    virtual environment whose prefix is the checkout, say) it is covered with an empty tmpfs, and only the
    package folders and environments inside it are bound again on top."""
    bound: list[Path] = []
    argv: list[str] = []
    for path in paths:
        if any(_inside(path, b) for b in bound) or _inside(path, Path("/usr")):
            continue
        if checkout is not None and _inside(path, checkout):
            continue  # bound below, after the checkout is covered
        bound.append(path)
        argv += ["--ro-bind", str(path), str(path)]
    if checkout is None:
        return bound, argv
    if any(_inside(checkout, b) for b in bound):
        argv += ["--tmpfs", str(checkout)]
    inner: list[Path] = []
    for path in paths:
        if path == checkout:  # a virtual environment made in the checkout's own folder
            cfg = checkout / "pyvenv.cfg"
            argv += ["--ro-bind", str(cfg), str(cfg)] if cfg.is_file() else []
        elif _inside(path, checkout) and not any(_inside(path, b) for b in inner):
            inner.append(path)
            argv += ["--ro-bind", str(path), str(path)]
    return bound + inner, argv


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def bwrap_argv(staged: Staged, settings: Settings, *, gpu: bool) -> list[str]:
    """The bubblewrap command line that confines one job attempt (see the module docstring)."""
    binary = shutil.which("bwrap") or "bwrap"
    argv = _bwrap_base(binary)
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime"):
        if (Path("/etc") / name).exists():
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    # a fresh /tmp first: a checkout or virtual environment under /tmp is bound on top of it below
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if "--size" in _bwrap_options(binary):
        argv += ["--size", str(TMP_BYTES)]
    argv += ["--tmpfs", "/tmp"]
    bound, binds = _python_binds(_python_paths(), _checkout())
    argv += binds
    # never expose the data folder (database, artifact store, keys), even when it sits inside a bound folder
    data = settings.data_dir.resolve()
    for path in bound:
        if _inside(data, path):
            argv += ["--tmpfs", str(data)]
    if gpu:
        for device in sorted(Path("/dev").glob("nvidia*")):
            if device.is_char_device():
                argv += ["--dev-bind", str(device), str(device)]
    argv += [
        "--ro-bind",
        str(staged.inputs),
        str(SANDBOX_ROOT / "inputs"),
        "--ro-bind",
        str(staged.control),
        str(SANDBOX_ROOT / "control"),
        "--bind",
        str(staged.out),
        str(SANDBOX_ROOT / "out"),
        "--chdir",
        str(SANDBOX_ROOT / "out"),
    ]
    return argv


def child_env(settings: Settings, *, home: str) -> dict[str, str]:
    """The child's whole environment: thread counts, locale, a home in its tmp; nothing else."""
    threads = str(settings.sandbox_cpu_threads)
    env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
    env.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": "/tmp" if home == "/tmp" else home,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "TORCH_HOME": f"{home}/torch",
            "MPLCONFIGDIR": f"{home}/mpl",
        }
    )
    # the child imports the very clgate this worker runs (a checkout on the worker's path may shadow the
    # installed one: without this the child would find the other one, which it cannot see)
    import clgate

    root = Path(clgate.__file__).resolve().parent.parent
    if "site-packages" not in root.parts:
        env["PYTHONPATH"] = str(root)
    return env


def _limits(settings: Settings, *, gpu: bool) -> dict[str, int]:
    memory = settings.sandbox_memory_bytes
    return {
        # CUDA reserves far more address space than it uses: on a GPU the data segment is limited instead
        ("data" if gpu else "as"): memory,
        "fsize": settings.sandbox_max_file_bytes,
        "cpu": settings.job_time_limit_s * settings.sandbox_cpu_threads,
        "nofile": 1024,
        "core": 0,
    }


# Tests swap this for a command that wraps the same child (for example to disable a check in it).
CHILD_COMMAND: list[str] = ["-m", "clgate.workers.sandbox_child"]


def child_argv(
    staged: Staged, settings: Settings, mode: Mode, *, gpu: bool
) -> tuple[list[str], dict[str, str]]:
    """The full command (bwrap + python + child, or python + child) and its environment."""
    if mode == "bwrap":
        root = SANDBOX_ROOT
        prefix = bwrap_argv(staged, settings, gpu=gpu)
        env = child_env(settings, home="/tmp")
        for key, value in env.items():
            prefix += ["--setenv", key, value]
        inputs, control, out = root / "inputs", root / "control", root / "out"
        env_for_popen: dict[str, str] = {}
    else:
        prefix = []
        home = staged.work / "home"
        home.mkdir(exist_ok=True)
        env_for_popen = child_env(settings, home=str(home))
        inputs, control, out = staged.inputs, staged.control, staged.out
    argv = [
        *prefix,
        sys.executable,
        *CHILD_COMMAND,
        str(inputs / "spec.json"),
        str(out),
        "--inputs",
        str(inputs),
        "--control",
        str(control),
        "--limits",
        json.dumps(_limits(settings, gpu=gpu)),
        "--threads",
        str(settings.sandbox_cpu_threads),
    ]
    if mode == "none":
        argv += ["--parent-pid", str(os.getpid())]
    return argv, env_for_popen


def read_bounded(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file written by the child (no link followed, at most ``limit``), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        return os.read(fd, limit + 1)[:limit]
    finally:
        os.close(fd)


def read_json(path: Path, limit: int = CONTROL_FILES_MAX_BYTES) -> dict[str, Any] | None:
    raw = read_bounded(path, limit)
    if raw is None:
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def collect_logs(out: Path, seeds: list[int], max_bytes: int) -> list[Path]:
    """The child's logs, one per seed in order, that are regular files (no links) within the size bound.

    Only ``logs/log-seed<N>.json`` for the spec's seeds are taken; the caller validates their content.
    """
    folder = out / "logs"
    if folder.is_symlink() or not folder.is_dir():
        return []
    found = []
    for seed in seeds:
        path = folder / f"log-seed{seed}.json"
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and 0 < info.st_size <= max_bytes:
            found.append(path)
    return found


def _kill(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # bwrap and, with --die-with-parent, everything inside it


def run_child(
    staged: Staged,
    settings: Settings,
    mode: Mode,
    *,
    seeds: list[int],
    gpu: bool,
    on_progress: Callable[[dict[str, Any]], None],
    cancel_requested: Callable[[], bool],
    deadline: float,
) -> ChildResult:
    """Run the child to its end; ask it to stop on cancel or at ``deadline`` (monotonic), kill it after
    the grace period. Progress it reports goes to ``on_progress`` (a parsed dict, not yet sanitised)."""
    argv, env = child_argv(staged, settings, mode, gpu=gpu)
    stderr_path = staged.work / "child.log"
    stopped: Literal["cancel", "timeout"] | None = None
    stop_at = 0.0
    killed = overflow = False
    last_progress: bytes | None = None
    next_size_check = time.monotonic() + SIZE_CHECK_EVERY_S
    max_output = OUTPUT_FILES_FACTOR * settings.sandbox_max_file_bytes
    with open(stderr_path, "wb") as child_log:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=child_log,
            stderr=child_log,
            cwd=staged.out,
            start_new_session=True,
        )
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if stopped is None:
                    if now > deadline:
                        stopped = "timeout"
                    elif cancel_requested():
                        stopped = "cancel"
                    if stopped is not None:
                        (staged.control / "stop").touch()
                        stop_at = now
                        log.info("job child %s: asked to stop (%s)", proc.pid, stopped)
                if now >= next_size_check:
                    next_size_check = now + SIZE_CHECK_EVERY_S
                    overflow = tree_size(staged.out) > max_output
                if overflow or (stopped is not None and now - stop_at > settings.sandbox_kill_grace_s):
                    log.warning(
                        "job child %s killed: %s",
                        proc.pid,
                        f"wrote more than {max_output} bytes"
                        if overflow
                        else f"did not stop within {settings.sandbox_kill_grace_s:.0f} s",
                    )
                    killed = True
                    _kill(proc, signal.SIGTERM)
                    try:
                        proc.wait(timeout=TERM_TO_KILL_S)
                    except subprocess.TimeoutExpired:
                        _kill(proc, signal.SIGKILL)
                        proc.wait()
                    break
                raw = read_bounded(staged.out / "progress.json", CONTROL_FILES_MAX_BYTES)
                if raw and raw != last_progress:
                    last_progress = raw
                    try:
                        document = json.loads(raw)
                    except ValueError:
                        document = None
                    if isinstance(document, dict):
                        on_progress(document)
                time.sleep(POLL_S)
        finally:
            if (
                proc.poll() is None
            ):  # the caller is being stopped (time limit, shutdown): take the child along
                _kill(proc, signal.SIGKILL)
                proc.wait()
            _kill(proc, signal.SIGKILL)  # anything it left in its process group
    report = (
        None if killed else (read_json(staged.out / "error.json") or read_json(staged.out / "result.json"))
    )
    logs = collect_logs(staged.out, seeds, settings.sandbox_max_file_bytes)
    return ChildResult(stopped, proc.returncode, killed, report, logs, overflow)


def child_log_tail(staged: Staged, limit: int = 2000) -> str:
    """The end of what the child printed (for the worker's log, never for the API)."""
    raw = read_bounded(staged.work / "child.log", 1 << 30) or b""
    return raw[-limit:].decode("utf-8", errors="replace")


# ---------------------------------------------------------------------- messages from the child
_ABS_PATH = re.compile(r"(?<![\w.])/(?:[\w.+@-]+/)+([\w.+@-]+)")


def job_relative(message: str, *roots: tuple[Path | str, str]) -> str:
    """``message`` with every ``root`` replaced by its label and any other absolute path cut to its name.

    >>> job_relative("/srv/d/jobs/j1/attempt-1/inputs/x.npz: bad", ("/srv/d/jobs/j1/attempt-1", ""))
    'inputs/x.npz: bad'
    >>> job_relative("cannot open /etc/secret/key.pem")
    'cannot open key.pem'
    """
    for root, label in roots:
        for text in {str(root), str(Path(root).resolve())}:
            text = text.rstrip("/")
            if text:
                message = message.replace(text + "/", label + "/" if label else "").replace(
                    text, label or "."
                )
    return _ABS_PATH.sub(lambda m: m.group(1), message)

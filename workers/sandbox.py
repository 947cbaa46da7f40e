"""Confined execution: the process that runs a job's submitted model sees only what that job gives it.

A job is split across a trust boundary (:mod:`clgate.engine.trusted`): the worker process — the trusted
side, called by :func:`clgate.workers.runner._run_engine` — copies the job's inputs out of the store
into ``<attempt>/inputs`` (verified against their hashes), loads the data, keeps the held-out labels,
and stages for the child only the training samples and the held-out *inputs*. The child,
``python -m clgate.engine.child`` (:mod:`clgate.engine.child`), started here by :class:`SandboxLauncher`
(or started ahead of the job with the same command line and taken from :mod:`clgate.workers.pool`),
loads the model, trains it and returns predictions over a pipe; the worker counts them and writes the
logs into ``<attempt>/logs``, where the child cannot reach:

- ``bwrap`` (bubblewrap, ``CLGATE_SANDBOX=bwrap`` or ``auto`` when it works): new user, PID, network,
  IPC, UTS and cgroup namespaces (``--unshare-all``: no network at all), no capabilities, no new user
  namespaces, ``--die-with-parent``, ``--new-session``, a cleared environment, a fresh ``/tmp``; the
  filesystem holds only the system libraries, the Python installation and clgate's packages (read-only),
  the staged inputs at ``/job/inputs`` (read-only) and its output folder at ``/job/out`` (the only
  writable place, for the final model). The data folder — database, artifact store, key files — is not
  there; it is hidden under an empty tmpfs if it lies inside a bound folder.
- ``none`` (only with ``CLGATE_ALLOW_UNCONFINED=true``): the same child and limits without the
  namespaces; the service warns at start and ``/readyz`` reports ``sandbox: unconfined``.

Limits in both: address space (``CLGATE_SANDBOX_MEMORY_BYTES``), file size
(``CLGATE_SANDBOX_MAX_FILE_BYTES``: each file, ``child.log`` — its standard error — included; the
engine's trusted side bounds its messages and the logs built from them by the same number), CPU
threads (``CLGATE_SANDBOX_CPU_THREADS``), CPU time (the hard time limit × threads), open files, no core
dumps, the output folder's total size, and wall time: at the soft time limit or on cancel the child is
asked to stop (a ``stop`` message on its standard input) and is killed ``CLGATE_SANDBOX_KILL_GRACE_S`` later.

Nothing the child sends is trusted: every message is checked by the engine's trusted side, counts are
made from the labels the child never saw, and the error it reports is shortened and stripped of paths.
Metrics, decision and reports are computed by the trusted side.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import clgate
import clgate.schemas
import clgate.workers
from clgate.store.settings import Settings

if TYPE_CHECKING:  # the engine (torch) is imported by the job runner, not by the API process
    from clgate.engine.runner import ChildLaunch

log = logging.getLogger("clgate.sandbox")

Mode = Literal["bwrap", "none"]
SANDBOX_ROOT = Path("/job")
TMP_BYTES = 64 * 1024 * 1024  # the child's /tmp (a tmpfs, where bwrap can size it)
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
    """A job attempt's folders: ``inputs`` (the job's files, copied out of the store: the trusted side
    reads them) and ``logs`` (the evaluation logs the trusted side writes). The child's own folders —
    what it may read, where it may write — are made by the engine under ``work``."""

    work: Path
    inputs: Path = field(init=False)
    logs: Path = field(init=False)

    def __post_init__(self) -> None:
        self.work = self.work.resolve()  # bwrap binds need absolute paths
        self.inputs, self.logs = self.work / "inputs", self.work / "logs"
        for folder in (self.inputs, self.logs):
            folder.mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------------- the child
# The child's output folder may hold this many times CLGATE_SANDBOX_MAX_FILE_BYTES in all (checked every
# few seconds); a child that writes more is killed.
OUTPUT_FILES_FACTOR = 4
SIZE_CHECK_EVERY_S = 2.0
# What one entry of the output folder counts for at least (an inode and a block): a flood of empty
# files or folders reaches the bound as surely as one of data.
ENTRY_BYTES = 4096


def tree_size(folder: Path) -> int:
    """Bytes under ``folder`` (links not followed), each entry — file, folder, link — counted as at least
    :data:`ENTRY_BYTES`."""
    total = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        total += ENTRY_BYTES * len(dirs)
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += max(info.st_size if stat.S_ISREG(info.st_mode) else 0, ENTRY_BYTES)
    return total


def _python_paths() -> list[Path]:
    """Folders the child needs read-only to run Python and import clgate and its dependencies."""
    paths = {Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix)}
    for module in (clgate, clgate.schemas, clgate.workers):  # the child imports nothing of the API
        paths.add(Path(str(module.__file__)).resolve().parent)
    try:  # the shipped examples (package data): the child may read a bundled spec or log
        examples = importlib.import_module("clgate.examples")
        paths.update(Path(p).resolve() for p in examples.__path__)
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


class Folders(Protocol):
    """What the command line of a child reads of its launch (a :class:`clgate.engine.runner.ChildLaunch`
    or a pooled child's own folders)."""

    @property
    def stage(self) -> Path: ...
    @property
    def out(self) -> Path: ...
    @property
    def threads(self) -> int: ...


def bwrap_argv(launch: Folders, settings: Settings, *, gpu: bool) -> list[str]:
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
        str(launch.stage.resolve()),
        str(SANDBOX_ROOT / "inputs"),
        "--bind",
        str(launch.out.resolve()),
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
CHILD_COMMAND: list[str] = ["-m", "clgate.engine.child"]


def child_argv(
    launch: Folders, settings: Settings, mode: Mode, *, gpu: bool, wait: bool = False
) -> tuple[list[str], dict[str, str]]:
    """The full command (bwrap + python + child, or python + child) and its environment; ``wait``: a
    pre-started child that runs after a ``go`` frame (:mod:`clgate.workers.pool`)."""
    if mode == "bwrap":
        prefix = bwrap_argv(launch, settings, gpu=gpu)
        for key, value in child_env(settings, home="/tmp").items():
            prefix += ["--setenv", key, value]
        stage, out = SANDBOX_ROOT / "inputs", SANDBOX_ROOT / "out"
        env_for_popen: dict[str, str] = {}
    else:
        prefix = []
        home = launch.out.parent / "home"
        home.mkdir(exist_ok=True)
        env_for_popen = child_env(settings, home=str(home))
        stage, out = launch.stage, launch.out
    argv = [
        *prefix,
        sys.executable,
        *CHILD_COMMAND,
        str(stage),
        str(out),
        "--threads",
        str(launch.threads),
        "--limits",
        json.dumps(_limits(settings, gpu=gpu)),
    ]
    if mode == "none":
        argv += ["--parent-pid", str(os.getpid())]
    if wait:
        argv.append("--wait")
    return argv, env_for_popen


def _kill(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # bwrap and, with --die-with-parent, everything inside it


class ChildSource(Protocol):
    """Pre-started children (:class:`clgate.workers.pool.SandboxPool`): ``take`` hands one over, its
    inputs in place and told to go, or returns ``None`` (none fits: the launcher starts a fresh one)."""

    def take(self, launch: ChildLaunch, log_path: Path | None) -> subprocess.Popen[bytes] | None: ...


class SandboxLauncher:
    """Starts the engine's child (:mod:`clgate.engine.child`) confined as ``mode`` says, for
    :func:`clgate.engine.run_job`; its prints go to ``<work>/child.log``.

    With a ``pool`` the child is a pre-started one when the pool has one that fits (``pooled`` then
    says so), else a fresh one. :meth:`check` (called while the job runs) kills the child when its
    output folder grows past ``OUTPUT_FILES_FACTOR`` × ``CLGATE_SANDBOX_MAX_FILE_BYTES``; ``overflow``
    then says so. Without ``work`` (the command line) the child's prints go to this process's
    standard error.
    """

    def __init__(
        self, settings: Settings, mode: Mode, work: Path | None, *, gpu: bool, pool: ChildSource | None = None
    ) -> None:
        self.settings, self.mode, self.work, self.gpu, self.pool = settings, mode, work, gpu, pool
        self.proc: subprocess.Popen[bytes] | None = None
        self.out: Path | None = None
        self.overflow = False
        self.pooled = False
        self._next_check = 0.0

    def __call__(self, launch: ChildLaunch) -> subprocess.Popen[bytes]:
        self.out = launch.out
        log_path = self.work / "child.log" if self.work is not None else None
        if self.pool is not None:
            taken = self.pool.take(launch, log_path)
            if taken is not None:
                self.proc, self.pooled = taken, True
                return taken
        argv, env = child_argv(launch, self.settings, self.mode, gpu=self.gpu)
        with open(log_path, "ab") if log_path else contextlib.nullcontext(None) as child_log:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=child_log,
                cwd=launch.out,
                start_new_session=True,
            )
        return self.proc

    def check(self) -> None:
        """Kill the child if it wrote too much (checked every ``SIZE_CHECK_EVERY_S``)."""
        now = time.monotonic()
        if self.proc is None or self.out is None or now < self._next_check or self.overflow:
            return
        self._next_check = now + SIZE_CHECK_EVERY_S
        limit = OUTPUT_FILES_FACTOR * self.settings.sandbox_max_file_bytes
        if tree_size(self.out) > limit:
            self.overflow = True
            log.warning("job child %s killed: wrote more than %d bytes", self.proc.pid, limit)
            _kill(self.proc, signal.SIGKILL)


def read_tail(path: Path, limit: int) -> bytes | None:
    """The last ``limit`` bytes of a regular file written by the child (no link followed), however long
    it is, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return os.pread(fd, limit, max(0, info.st_size - limit))
    finally:
        os.close(fd)


def child_log_size(staged: Staged) -> int:
    """Bytes the child printed (``<work>/child.log``; 0 when absent or not a regular file). Its
    ``RLIMIT_FSIZE`` (``CLGATE_SANDBOX_MAX_FILE_BYTES``) stops it there: this many bytes mean it was cut."""
    try:
        info = os.lstat(staged.work / "child.log")
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def child_log_tail(staged: Staged, limit: int = 2000) -> str:
    """The end of what the child printed (for the worker's log, never for the API): its last ``limit``
    bytes only, whatever the file's size (up to CLGATE_SANDBOX_MAX_FILE_BYTES, the child's RLIMIT_FSIZE)."""
    raw = read_tail(staged.work / "child.log", limit) or b""
    return raw.decode("utf-8", errors="replace")


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

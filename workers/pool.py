"""Pre-started, pre-imported confined children: a service job's model starts without waiting for
Python, torch and the engine to load.

A job's child (:mod:`clgate.engine.child`) spends seconds starting — bubblewrap, the interpreter,
torch, the engine — before it opens the job's files. :class:`SandboxPool` keeps ``CLGATE_SANDBOX_POOL``
children of this process (default 1; 0: none, every job starts its own as before) already started and
waiting. Each was started exactly as :class:`clgate.workers.sandbox.SandboxLauncher` starts a fresh
one — the same bwrap command line (namespaces, no network, ``nobody``, no capabilities, a cleared
environment, a fresh ``/tmp``, the data folder absent), the same resource limits, set before anything
else — except that its ``/job/inputs`` (read-only) and ``/job/out`` are two empty folders of its own
slot, and ``--wait``: it imports torch and the engine, says ``ready`` and blocks on its standard input.

A job takes one (:meth:`SandboxPool.take`): the trusted side has staged the job's inputs as usual; they
are moved (renamed, never copied or linked) into that child's empty input folder, which then takes the
place of the job's stage folder, and its output folder takes the place of the job's; then a ``go``
frame tells the child to open them. From there on it is the job's child like any other: the trusted
side reads its frames and checks every one, and stops and kills it on cancel or at the time limit.

Why this confines as much as a fresh child:

- nothing of a job reaches a child before it is that job's: a waiting child has opened no job file, and
  its folders were empty; it sees the job's inputs only after ``go``, exactly the files staged for it;
- a child runs one job and exits (the pool never sends a second ``go``; a child that ends is never
  taken): no file, ``/tmp`` content, memory or thread of one job can reach the next, whose child is
  another process in other namespaces;
- its limits are the deployment's (``CLGATE_SANDBOX_*``, the hard time limit for CPU time), the ones a
  fresh child gets; a job that needs another child (a GPU job when the waiting one has no GPU
  devices, other thread counts) gets a fresh one, and the pool's next children are made like it. Wall
  time, cancel and the output folder's size are enforced on the trusted side, per job, as before;
- a waiting child that died or never said ``ready`` is killed and a fresh one started instead.

A replacement starts as soon as a job takes a child, so that it has loaded by the time the next job
comes (its imports share the CPU with the running job for a few seconds), and again once a job's child
has ended if one is missing (:meth:`refill`). Children are started in the thread that runs jobs: a
pooled child dies with the thread that started it (``--die-with-parent``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clgate.store.settings import Settings
from clgate.workers import sandbox

if TYPE_CHECKING:  # the engine (torch) is imported by the job runner, not by the API process
    from clgate.engine.runner import ChildLaunch

log = logging.getLogger("clgate.sandbox.pool")

POOL_FOLDER = ".sandbox-pool"  # under CLGATE_DATA_DIR/jobs: the job folders' file system (renames)
READY_TIMEOUT_S = 120.0
_HOST = socket.gethostname().replace("-", "_")  # a waiting child that has not said ready by then is replaced


def _frame(header: dict[str, str]) -> bytes:
    """A header-only frame as :func:`clgate.engine.protocol.encode_frame` makes it (written out here:
    importing the engine loads torch, which a worker need not have loaded to start its pool)."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">I", len(raw)) + raw


@dataclass(frozen=True)
class _SlotLaunch:
    """What :func:`clgate.workers.sandbox.child_argv` reads of a launch: the waiting child's folders."""

    stage: Path
    out: Path
    threads: int
    gpu: bool


@dataclass
class _Waiting:
    """One pre-started child: its process, its slot folder (``stage``, ``out``, ``child.log``), and
    what it was made for (GPU devices, threads)."""

    proc: subprocess.Popen[bytes]
    slot: Path
    gpu: bool
    threads: int
    started: float
    ready: bool = False


class SandboxPool:
    """``size`` children confined as ``mode`` says, started for ``gpu`` jobs or not; see the module."""

    def __init__(self, settings: Settings, mode: sandbox.Mode, size: int, *, gpu: bool = False) -> None:
        self.settings, self.mode, self.size = settings, mode, size
        self.gpu, self.threads = gpu, settings.sandbox_cpu_threads
        self.root = (
            settings.jobs_dir.resolve() / POOL_FOLDER / f"{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"
        )
        self.waiting: list[_Waiting] = []
        self.taken = 0  # children handed to jobs (for tests and the benchmark)
        self._lock = threading.Lock()
        self._ready_frame: bytes | None = None

    # ------------------------------------------------------------ children
    def refill(self) -> None:
        """Start children until ``size`` wait (dead ones are dropped first)."""
        with self._lock:
            self._fill()

    def _fill(self) -> None:
        for child in [c for c in self.waiting if c.proc.poll() is not None]:
            log.warning("pooled job child %s ended while waiting (%s)", child.proc.pid, child.proc.returncode)
            self._discard(child)
        while len(self.waiting) < self.size:
            self.waiting.append(self._start())

    def _start(self) -> _Waiting:
        slot = self.root / f"slot-{secrets.token_hex(6)}"
        stage, out = slot / "stage", slot / "out"
        stage.mkdir(parents=True)
        out.mkdir()
        launch = _SlotLaunch(stage, out, self.threads, self.gpu)
        argv, env = sandbox.child_argv(launch, self.settings, self.mode, gpu=self.gpu, wait=True)
        with open(slot / "child.log", "ab") as child_log:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=child_log,
                cwd=out,
                start_new_session=True,
            )
        return _Waiting(proc, slot, self.gpu, self.threads, time.monotonic())

    def _discard(self, child: _Waiting) -> None:
        with contextlib.suppress(ValueError):
            self.waiting.remove(child)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=10)
        for stream in (child.proc.stdin, child.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        shutil.rmtree(child.slot, ignore_errors=True)

    def _is_ready(self, child: _Waiting) -> bool:
        """Whether ``child`` lives and has said ``ready`` (waiting up to what is left of its start)."""
        if child.ready:
            return child.proc.poll() is None
        if self._ready_frame is None:
            self._ready_frame = _frame({"type": "ready"})
        assert child.proc.stdout is not None
        fd, got = child.proc.stdout.fileno(), b""
        deadline = child.started + READY_TIMEOUT_S
        while len(got) < len(self._ready_frame):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return False
            chunk = os.read(fd, len(self._ready_frame) - len(got))
            if not chunk:
                return False
            got += chunk
        child.ready = got == self._ready_frame
        return child.ready

    # ------------------------------------------------------------ a job takes one
    def take(self, launch: ChildLaunch, log_path: Path | None) -> subprocess.Popen[bytes] | None:
        """A waiting child, given ``launch``'s staged inputs and told to go; ``None`` when none fits
        (the caller starts a fresh child). ``launch.stage`` and ``launch.out`` are then the child's
        own folders (same paths, moved into place)."""
        with self._lock:
            self.gpu, self.threads = launch.gpu, launch.threads  # the next children are made like this job's
            while self.waiting:
                child = self.waiting.pop(0)
                fits = (child.gpu, child.threads) == (launch.gpu, launch.threads)
                if not fits or not self._is_ready(child):
                    if fits:
                        log.warning("pooled job child %s is not ready: starting a fresh one", child.proc.pid)
                    self._discard(child)
                    continue
                if not self._same_filesystem(child, launch):
                    self._discard(child)
                    return None
                self._hand_over(child, launch, log_path)
                self.taken += 1
                self._fill()  # the replacement loads while this job runs: ready for the next one
                return child.proc
        return None

    def _same_filesystem(self, child: _Waiting, launch: ChildLaunch) -> bool:
        return os.stat(child.slot).st_dev == os.stat(launch.stage).st_dev == os.stat(launch.out).st_dev

    def _hand_over(self, child: _Waiting, launch: ChildLaunch, log_path: Path | None) -> None:
        stage, out = child.slot / "stage", child.slot / "out"
        for entry in list(launch.stage.iterdir()):  # the staged inputs into the child's own input folder
            os.rename(entry, stage / entry.name)
        launch.stage.rmdir()
        os.rename(stage, launch.stage)
        for entry in list(launch.out.iterdir()):
            os.rename(entry, out / entry.name)
        launch.out.rmdir()
        os.rename(out, launch.out)
        if log_path is not None:
            os.replace(child.slot / "child.log", log_path)  # the same file: what it prints from now on
        if self.mode == "bwrap":
            paths = {"stage": str(sandbox.SANDBOX_ROOT / "inputs"), "out": str(sandbox.SANDBOX_ROOT / "out")}
        else:
            paths = {"stage": str(launch.stage), "out": str(launch.out)}
        assert child.proc.stdin is not None
        child.proc.stdin.write(_frame({"type": "go", **paths}))
        child.proc.stdin.flush()
        if self.mode == "bwrap":
            shutil.rmtree(child.slot, ignore_errors=True)  # empty now; an unconfined child's home stays

    def shutdown(self) -> None:
        """Kill the waiting children and remove their folders."""
        with self._lock:
            for child in list(self.waiting):
                self._discard(child)
        shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------- this process's pool
_POOL: SandboxPool | None = None


def start(settings: Settings) -> SandboxPool | None:
    """Start this process's pool (``CLGATE_SANDBOX_POOL`` children; none when 0 or when jobs cannot
    run here), replacing one started before. Call it in the thread that will run the jobs."""
    global _POOL
    stop()
    _remove_leftovers(settings.jobs_dir.resolve() / POOL_FOLDER)
    status = sandbox.sandbox_status(settings)
    if settings.sandbox_pool == 0 or status.mode is None:
        return None
    gpu = Path("/dev/nvidiactl").exists()  # a GPU worker's jobs mostly use it; a CPU job gets a fresh child
    _POOL = SandboxPool(settings, status.mode, settings.sandbox_pool, gpu=gpu)
    _POOL.refill()
    return _POOL


def _remove_leftovers(folder: Path) -> None:
    """Slot folders of this host's processes that ended without shutting their pool down (killed)."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        host, _, rest = entry.name.rpartition("-")[0].rpartition("-")
        if host != _HOST or not rest.isdigit():
            continue
        try:
            os.kill(int(rest), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:  # a live process of another user
            continue


def current(settings: Settings) -> SandboxPool | None:
    """This process's pool when it was started with these settings."""
    return _POOL if _POOL is not None and _POOL.settings == settings else None


def stop() -> None:
    """Shut this process's pool down (at exit, or before a new one)."""
    global _POOL
    pool, _POOL = _POOL, None
    if pool is not None:
        pool.shutdown()

"""The trusted side of a job: it holds the held-out labels, counts, and writes the evaluation log.

:func:`run_job` loads the data, chooses the evaluation samples, stages the child's inputs
(:mod:`clgate.engine.staging`: training samples with labels, held-out inputs shuffled and without
labels), starts the child through a launcher (a plain subprocess, or bubblewrap from
:mod:`clgate.workers.sandbox`) and reads its messages (:mod:`clgate.engine.protocol`). It knows which
points must come: seeds in the spec's order, tasks in order, each task's points before its end, points
between task ends every ``eval_every`` updates, and in evaluate mode exactly the checkpoint plan. Every
message is checked (type, fields, the number of predictions, the range of class indices); the counts
are made here, from the labels the child never saw. A message out of place ends the job with
:class:`~clgate.engine.protocol.ProtocolError`; a child that stops early leaves a partial log (which no
gate passes). With ``max_file_bytes`` (the service's ``CLGATE_SANDBOX_MAX_FILE_BYTES``) a message header,
a seed's log and a file in the child's output folder are bounded too, and reaching the bound ends the job
naming it. Nothing the child writes is read as a count. What it reports about resources (parameters,
memory, mul-adds) and the model (strategy parameters, cost per sample) is its claim, recorded as such.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

import clgate
from clgate.engine import errors
from clgate.engine.data import Dataset, load_data
from clgate.engine.errors import EngineInputError
from clgate.engine.evaluator import select_heldout
from clgate.engine.models import file_digest
from clgate.engine.protocol import (
    MAX_HEADER_BYTES,
    FrameReader,
    ProtocolError,
    check_predictions,
    encode_frame,
    field,
    prediction_dtype,
)
from clgate.engine.scenario import Scenario, scenario_from_spec
from clgate.engine.schedule import plan_checkpoints
from clgate.engine.staging import Staging, stage_job
from clgate.logfile import write_log
from clgate.schemas.evaluation_log import EvaluationLog, TaskResources
from clgate.schemas.job import JobSpec

PROGRESS_INTERVAL_S = 0.2
POLL_S = 0.1
STOP_GRACE_S = 30.0
MESSAGE_LIMIT = 2000
#: The setting the service takes ``max_file_bytes`` from (named in the refusals, so an operator finds it).
FILE_BOUND = "CLGATE_SANDBOX_MAX_FILE_BYTES"


@dataclass(frozen=True)
class Progress:
    """Where a run is; handed to the ``progress`` callback (at evaluation points and every ~0.2 s)."""

    seed: int
    seed_index: int  # 0-based position of this seed in the job's seeds
    n_seeds: int
    task: int  # 1-based task being trained (or evaluated)
    n_tasks: int
    iteration: int  # updates done in this seed's run
    total_iterations: int  # planned updates for this seed's run (estimate for gdumb/joint sizes)
    last_eval: float | None  # accuracy (pooled over evaluated samples) at the last evaluation point
    elapsed_s: float  # wall time of this seed's run so far

    @property
    def fraction(self) -> float:
        return self.iteration / self.total_iterations if self.total_iterations else 1.0


class JobCancelled(RuntimeError):
    """``should_stop`` asked the run to stop; ``paths`` are the logs written (the last one partial)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        super().__init__(f"job cancelled; {len(paths)} log(s) written, the last one partial")


class TrainingDiverged(EngineInputError):
    """Training produced a non-finite loss or weights (a learning rate or a regularisation weight too
    large for the data). The log so far is written as a partial log that records ``diverged``; ``paths``
    are the logs written (the last one the diverged run's)."""

    def __init__(self, message: str, paths: list[Path] | None = None) -> None:
        super().__init__(message)
        self.paths = paths or []


class ChildError(RuntimeError):
    """The child failed with an error that is not the input's (its type and message, as it reported)."""


@dataclass(frozen=True)
class ChildLaunch:
    """What a launcher starts: the child on ``stage`` (read-only) writing into ``out``."""

    stage: Path
    out: Path
    threads: int  # at most this many CPU threads (0: the spec's)
    gpu: bool

    def argv(self, stage: str | None = None, out: str | None = None) -> list[str]:
        """``python -m clgate.engine.child`` with its arguments (paths as the child will see them)."""
        return [
            sys.executable,
            "-m",
            "clgate.engine.child",
            stage or str(self.stage),
            out or str(self.out),
            "--threads",
            str(self.threads),
        ]


#: Starts the child with pipes on its standard input and output (``Popen(..., stdin=PIPE, stdout=PIPE)``).
Launcher = Callable[[ChildLaunch], "subprocess.Popen[bytes]"]


def local_launcher(launch: ChildLaunch) -> subprocess.Popen[bytes]:
    """The child as a plain subprocess of this one (no confinement; it dies with this process), with
    this process's import path (packages added to ``sys.path`` at run time included)."""
    argv = [*launch.argv(), "--parent-pid", str(os.getpid())]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True
    )


def kill_child(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and what it started (its process group when it leads one)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


class HeldoutCounter:
    """Per-class (per-cell) counts from predictions in staged order, with the labels the child never saw.

    ``labels``: the held-out label of each staged sample; ``rank``: its position in the task-ordered
    selection (the samples of tasks ``1 … k`` are those with ``rank < ends[k - 1]``); ``cells``: in an
    NI/NIC scenario the log's cell of each staged sample (a prediction is right when it is the label,
    and is counted in the sample's cell); ``None``: the label is the column.

    >>> labels, rank = np.array([1, 0, 2]), np.array([1, 0, 2])
    >>> c = HeldoutCounter(labels, rank, ends=[2, 3], totals=[[1, 1, 0], [1, 1, 1]])
    >>> c.count(np.array([1, 1, 2]), seen_tasks=1)
    ([0, 1, 0], [1, 1, 0])
    """

    def __init__(
        self,
        labels: np.ndarray,
        rank: np.ndarray,
        *,
        ends: list[int],
        totals: list[list[int]],
        cells: np.ndarray | None = None,
    ) -> None:
        self.labels, self.rank, self.ends, self.totals = labels, rank, ends, totals
        self.columns = labels if cells is None else cells
        self.n_classes = len(totals[0])

    def count(self, preds: np.ndarray, *, seen_tasks: int) -> tuple[list[int], list[int]]:
        """``(correct, total)`` per class over the samples of tasks ``1 … seen_tasks``."""
        hit = (self.rank < self.ends[seen_tasks - 1]) & (preds == self.labels)
        correct = np.bincount(self.columns[hit], minlength=self.n_classes)
        return correct.tolist(), list(self.totals[seen_tasks - 1])


# ---------------------------------------------------------------------- one seed's log
class _SeedLog:
    """One seed's evaluation log, built from checked messages and the trusted side's own counts."""

    def __init__(
        self, job: _Session, seed: int, index: int, meta: dict[str, Any], total_iterations: int
    ) -> None:
        self.job, self.seed, self.index = job, seed, index
        self.path = job.out_dir / f"log-seed{seed}.json"
        self.meta = meta
        self.total_iterations = total_iterations
        self.points: list[dict[str, Any]] = []
        self.resources: list[TaskResources] = []
        self.divergence: dict[str, Any] | None = None
        self.task = 1  # the task whose points come now
        self.ended_task = 0  # the last task whose task-end point came
        self.iteration = 0
        self.last_eval: float | None = None
        self.started = time.monotonic()
        self.plan = plan_checkpoints(job.spec, len(job.tasks)) if job.spec.mode == "evaluate" else None
        self.size = 0  # bytes of the log's compact JSON so far (classes, tasks, meta, points, resources)
        self.grow([job.data.class_names, job.tasks, meta])

    def grow(self, item: Any) -> None:
        """Count ``item``'s compact JSON toward the log's size; past the job's ``max_file_bytes`` the job
        ends (:class:`ProtocolError`) before the item is kept, so the partial log stays under the bound."""
        self.size += len(json.dumps(item, separators=(",", ":"), default=str)) + 1
        limit = self.job.max_file_bytes
        if limit is not None and self.size > limit:
            raise ProtocolError(
                f"seed {self.seed}: the evaluation log would exceed {limit} bytes ({FILE_BOUND}, the largest "
                f"log accepted) at point {len(self.points) + 1}: the model's process sent more than a log "
                "may hold; the log so far is kept as a partial log"
            )

    def log(self, partial: bool) -> EvaluationLog:
        try:
            return EvaluationLog.model_validate(
                {
                    **self.job.scenario.log_fields(),
                    "class_names": self.job.data.class_names,
                    "tasks": self.job.tasks,
                    "points": self.points,
                    "resources": self.resources if self.job.spec.mode == "retrain" else None,
                    "meta": self.meta,
                    "partial": partial or self.divergence is not None,
                    "diverged": self.divergence,
                }
            )
        except ValidationError as exc:
            raise ProtocolError(f"seed {self.seed}: the points sent do not make a valid log: {exc}") from None

    def save(self, partial: bool) -> None:
        write_log(self.log(partial), self.path)

    def progress(self, force: bool = False) -> None:
        self.job.report(self, force)

    def point(self, header: dict[str, Any], preds: np.ndarray) -> None:
        iteration = field(header, "iteration", int)
        task = field(header, "task", int)
        task_end = field(header, "task_end", bool)
        self._check_point(iteration, task, task_end)
        check_predictions(preds, len(self.job.data.class_names))
        correct, total = self.job.count(preds, task)
        point = {"iteration": iteration, "task": task, "task_end": task_end}
        point |= {"correct": correct, "total": total}
        self.grow(point)
        self.points.append(point)
        if self.plan is not None:
            path = self.job.checkpoint_file(len(self.points) - 1)
            self.meta["checkpoints"].append(
                {"path": str(path), "sha256": file_digest(path), "iteration": iteration}
            )
        if task_end:
            self.ended_task = task
        self.iteration = iteration
        n = sum(total)
        self.last_eval = sum(correct) / n if n else None
        self.progress(force=True)

    def _check_point(self, iteration: int, task: int, task_end: bool) -> None:
        where = f"seed {self.seed}: a point at iteration {iteration}, task {task}"
        if self.plan is not None:
            i = len(self.points)
            if i >= len(self.plan) or self.plan[i][1:] != (iteration, task, task_end):
                raise ProtocolError(f"{where}: not the next checkpoint of the plan")
            return
        spec = self.job.spec
        if task != self.task or self.ended_task == task:
            raise ProtocolError(f"{where}: task {self.task} is being trained")
        if self.points and iteration <= self.points[-1]["iteration"]:
            raise ProtocolError(f"{where}: not after the previous point")
        if task_end or iteration < 0:
            if iteration < 0 or (iteration == 0 and not (task == 1 and spec.scenario.first_task_learned)):
                raise ProtocolError(f"{where}: a task ends after its updates")
            return
        before_first = not self.points and task == 1 and spec.evaluation.before_first_update
        every = spec.evaluation.eval_every
        if not (iteration == 0 and before_first) and not (every and iteration > 0 and iteration % every == 0):
            raise ProtocolError(f"{where}: points come every {every} updates and at task ends")

    def task_done(self, header: dict[str, Any]) -> None:
        task = field(header, "task", int)
        iterations = field(header, "iterations", int)
        raw = field(header, "resources", dict)
        if self.plan is not None or task != self.task or self.ended_task != task or iterations < 0:
            raise ProtocolError(f"seed {self.seed}: task {task} reported done out of place")
        try:
            resources = TaskResources(**raw)
        except (ValidationError, TypeError) as exc:
            raise ProtocolError(f"seed {self.seed}, task {task}: resources: {exc}") from None
        if resources.task != task:
            raise ProtocolError(f"seed {self.seed}: resources of task {resources.task} for task {task}")
        self.grow(raw)
        self.resources.append(resources)
        self.meta["iterations_per_task"].append(iterations)
        self.task += 1
        if task < len(self.job.tasks):
            self.save(partial=True)

    def current_task(self) -> int:
        if self.plan is None:
            return min(self.task, len(self.job.tasks))
        return self.points[-1]["task"] if self.points else 1

    def complete(self) -> bool:
        if self.plan is not None:
            return len(self.points) == len(self.plan)
        return len(self.resources) == len(self.job.tasks)


# ---------------------------------------------------------------------- the job
class _Session:
    """The whole job on the trusted side: the message dispatcher, the counts, the logs written."""

    def __init__(
        self,
        spec: JobSpec,
        data: Dataset,
        scenario: Scenario,
        staging: Staging,
        out_dir: Path,
        progress: Callable[[Progress], None] | None,
        *,
        digest: str,
        base_dir: Path | None,
        max_file_bytes: int | None = None,
    ) -> None:
        self.spec, self.data, self.staging, self.out_dir = spec, data, staging, out_dir
        self.max_file_bytes = max_file_bytes
        self.scenario = scenario
        self.tasks = scenario.cells  # the log's tasks: classes (NC) or cells (NI/NIC)
        self.progress_cb = progress
        self.digest = digest
        self.base_dir = base_dir
        self.reader = FrameReader(
            prediction_dtype(data.n_classes),
            expected_n=staging.n,
            max_header_bytes=MAX_HEADER_BYTES if max_file_bytes is None else max_file_bytes,
            bound=FILE_BOUND,
        )
        sel = staging.selection
        self.counter = HeldoutCounter(
            staging.labels, staging.rank, ends=sel.ends, totals=sel.totals, cells=staging.cells
        )
        self.hello: dict[str, Any] | None = None
        self.current: _SeedLog | None = None
        self.written: list[Path] = []
        self.finished: list[_SeedLog] = []
        self.error: dict[str, Any] | None = None
        self.stopped = False
        self.last_progress = 0.0

    # ------------------------------------------------------------ counting
    def count(self, preds: np.ndarray, task: int) -> tuple[list[int], list[int]]:
        """Per-class (correct, total) over the tasks ``1 … task`` (all with future tasks)."""
        k = len(self.tasks) if self.spec.evaluation.future_tasks else task
        return self.counter.count(preds, seen_tasks=k)

    def checkpoint_file(self, i: int) -> Path:
        """The user's file of checkpoint ``i`` of the plan (its path and hash go into the log)."""
        assert self.current is not None and self.current.plan is not None
        path = Path(self.current.plan[i][0]).expanduser()
        return self.base_dir / path if not path.is_absolute() and self.base_dir is not None else path

    def report(self, seed_log: _SeedLog, force: bool) -> None:
        if self.progress_cb is None:
            return
        now = time.monotonic()
        if not force and now - self.last_progress < PROGRESS_INTERVAL_S:
            return
        self.last_progress = now
        self.progress_cb(
            Progress(
                seed=seed_log.seed,
                seed_index=seed_log.index,
                n_seeds=len(self.spec.seeds),
                task=seed_log.current_task(),
                n_tasks=len(self.tasks),
                iteration=seed_log.iteration,
                total_iterations=seed_log.total_iterations,
                last_eval=seed_log.last_eval,
                elapsed_s=now - seed_log.started,
            )
        )

    # ------------------------------------------------------------ messages
    def handle(self, header: dict[str, Any], preds: np.ndarray | None) -> None:
        kind = header["type"]
        if self.error is not None or self.stopped:
            raise ProtocolError(f"a {kind!r} message after the child's last word")
        if kind == "hello":
            self._hello(header)
        elif kind == "error":
            self.error = {k: str(header.get(k))[:MESSAGE_LIMIT] for k in ("kind", "class", "message")}
        elif kind == "stopped":
            self.stopped = True
        elif self.hello is None:
            raise ProtocolError(f"a {kind!r} message before the child said hello")
        elif kind == "seed_start":
            self._seed_start(header)
        else:
            self._seed_message(kind, header, preds)

    def _hello(self, header: dict[str, Any]) -> None:
        if self.hello is not None:
            raise ProtocolError("a second hello")
        device = field(header, "device", str)[:64]
        threads = header.get("cpu_threads")
        if threads is not None:
            threads = field(header, "cpu_threads", int)
        precision = field(header, "precision", str)
        if precision not in ("fp32", "bf16"):
            raise ProtocolError(f"hello: precision {precision[:20]!r}")
        self.hello = {"device": device, "cpu_threads": threads, "precision": precision}

    def _seed_message(self, kind: str, header: dict[str, Any], preds: np.ndarray | None) -> None:
        run = self.current
        if run is None or header.get("seed") != run.seed:
            seed = str(header.get("seed"))[:20]
            raise ProtocolError(f"a {kind!r} message for seed {seed}, which is not running")
        if kind == "point":
            assert preds is not None
            run.point(header, preds)
        elif kind == "task_done":
            run.task_done(header)
        elif kind == "progress":
            total = field(header, "total_iterations", int)
            if total >= 0:
                run.total_iterations = total
            run.iteration = max(run.iteration, field(header, "iteration", int))
            run.progress()
        elif kind == "seed_end":
            self._seed_end(run, header)
        elif kind == "diverged":
            run.divergence = {
                "task": field(header, "task", int),
                "iteration": field(header, "iteration", int),
                "reason": field(header, "reason", str)[:500],
            }
            run.save(partial=True)
            self.stopped = True

    def _seed_start(self, header: dict[str, Any]) -> None:
        index = len(self.finished)
        seed = header.get("seed")
        if self.current is not None or index >= len(self.spec.seeds) or seed != self.spec.seeds[index]:
            raise ProtocolError(f"seed {str(seed)[:20]} started out of order")
        total = field(header, "total_iterations", int)
        claimed = field(header, "meta", dict)
        base = self._base_meta(seed)
        if set(claimed) & (set(base) | {"iterations_per_task", "checkpoints", "final_model"}):
            raise ProtocolError(f"seed {seed}: the child's meta overrides the trusted side's")
        if self.spec.mode == "evaluate":
            meta = base | {"strategy": "evaluate", "checkpoints": []}
        else:
            meta = base | self._model_claims(claimed) | {"iterations_per_task": []}
        self.current = _SeedLog(self, seed, index, meta, max(0, total))

    def _model_claims(self, claimed: dict[str, Any]) -> dict[str, Any]:
        """The child's model and strategy provenance, with the model file's path and hash made here."""
        model = self.spec.model
        name = model.torchscript or model.weights
        if name is None:
            return {k: v for k, v in claimed.items() if k not in ("model_file", "model_sha256")}
        path = next(iter(self.staging.model_files.values()))
        return claimed | {"model_file": str(path), "model_sha256": file_digest(path)}

    def _seed_end(self, run: _SeedLog, header: dict[str, Any]) -> None:
        final = header.get("final_model")
        expected = self.spec.mode == "retrain" and self.spec.training.save_final
        names = {f"model-seed{run.seed}.safetensors", f"model-seed{run.seed}.pt"}
        if not run.complete():
            raise ProtocolError(f"seed {run.seed}: ended before all its points and tasks came")
        if expected != (final is not None) or (final is not None and final not in names):
            raise ProtocolError(f"seed {run.seed}: final model {str(final)[:40]!r} (expected: {expected})")
        if final is not None:
            run.meta["final_model"] = final
        run.save(partial=False)
        self.written.append(run.path)
        self.finished.append(run)
        self.current = None

    def _base_meta(self, seed: int) -> dict[str, Any]:
        spec, data = self.spec, self.data
        assert self.hello is not None
        selection = self.staging.selection
        return {
            "seed": seed,
            "mode": spec.mode,
            "eval_every": spec.evaluation.eval_every,
            "task_accuracy": spec.evaluation.task_accuracy,
            "before_first_update": spec.evaluation.before_first_update,
            "subsample_per_task": spec.evaluation.subsample_per_task,
            "future_tasks": spec.evaluation.future_tasks,
            "predict_over": spec.model.predict_over,
            "first_task_learned": spec.scenario.first_task_learned,
            "data": {"kind": spec.data.kind, "source": data.source, "sha256": self.digest, **data.meta},
            "device": self.hello["device"],
            "cpu_threads": self.hello["cpu_threads"],
            "eval_selection": {
                "sha256": hashlib.sha256(f"{self.digest}:{selection.sha256}".encode()).hexdigest(),
                "samples": len(selection.indices),
                "subsample_per_task": spec.evaluation.subsample_per_task,
                "stratified": spec.evaluation.subsample_per_task is not None,
            },
            "precision": self.hello["precision"],
            "versions": {
                "clgate": clgate.__version__,
                "torch": _torch_version(),
                "python": platform.python_version(),
            },
            **self._scenario_meta(),
        }

    def _scenario_meta(self) -> dict[str, Any]:
        """NI/NIC runs: the scenario and its groups (an NC run's meta is as it always was)."""
        scenario = self.scenario
        if scenario.kind == "nc":
            return {}
        return {"scenario": {"type": scenario.kind, "groups": scenario.groups}}

    # ------------------------------------------------------------ the end
    def rewrite_finished(self) -> None:
        """Write the finished seeds' logs again, from memory: once the child has ended, whatever it may
        have written over them (unconfined, it can reach this folder) is replaced."""
        for run in self.finished:
            run.save(partial=False)

    def save_partial(self) -> list[Path]:
        """Write the running seed's log so far (partial); the paths of every log written."""
        self.rewrite_finished()
        if self.current is not None:
            try:
                self.current.save(partial=True)
            except ProtocolError:  # what came does not make a log: none is kept for this seed
                return list(self.written)
            return [*self.written, self.current.path]
        return list(self.written)

    def done(self) -> bool:
        return len(self.finished) == len(self.spec.seeds)


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


# ---------------------------------------------------------------------- driving the child
def _pump(
    proc: subprocess.Popen[bytes], session: _Session, should_stop: Callable[[], bool] | None, grace_s: float
) -> bool:
    """Read and handle the child's frames until its output ends; returns whether a stop was asked."""
    assert proc.stdout is not None and proc.stdin is not None
    fd = proc.stdout.fileno()
    asked_at: float | None = None
    next_poll = 0.0
    while True:
        now = time.monotonic()
        if asked_at is None and should_stop is not None and now >= next_poll:
            next_poll = now + POLL_S
            if should_stop():
                asked_at = now
                with contextlib.suppress(OSError):
                    proc.stdin.write(encode_frame({"type": "stop"}))
                    proc.stdin.close()
        if asked_at is not None and now - asked_at > grace_s:
            kill_child(proc)
            return True
        if not select.select([fd], [], [], POLL_S)[0]:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return asked_at is not None
        session.reader.feed(chunk)
        while (frame := session.reader.next_frame()) is not None:
            session.handle(*frame)


def _raise_child_error(session: _Session) -> None:
    error = session.error or {}
    message = session.staging.original_paths(error.get("message", ""))
    if error.get("kind") == "input":
        cls = getattr(errors, error.get("class", ""), None)
        if not (isinstance(cls, type) and issubclass(cls, EngineInputError)):
            cls = EngineInputError
        raise cls(message)
    raise ChildError(f"{error.get('class')}: {message}")


_SIGNALS = {
    9: "SIGKILL: killed (out of memory?)",
    24: "SIGXCPU: CPU time limit exceeded",
    25: "SIGXFSZ: a file exceeded the file-size limit",
    11: "SIGSEGV: crashed",
}


def describe_exit(returncode: int | None) -> str:
    """How the child ended, in words (a signal number from Popen's negative code or a shell's 128+N).

    >>> describe_exit(-9), describe_exit(3)
    ('was ended by signal 9 (SIGKILL: killed (out of memory?))', 'exited with code 3')
    """
    if returncode is None:
        return "did not exit"
    signum = -returncode if returncode < 0 else (returncode - 128 if returncode > 128 else 0)
    if signum:
        return f"was ended by signal {signum} ({_SIGNALS.get(signum, 'see its output')})"
    return f"exited with code {returncode}"


def files_at_limit(folder: Path, limit: int) -> list[str]:
    """The regular files under ``folder`` (links not followed) of ``limit`` bytes or more: files the
    child's ``RLIMIT_FSIZE`` stopped, cut at the limit (its writes past it failed)."""
    found = []
    for root, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            path = Path(root) / name
            with contextlib.suppress(OSError):
                info = path.lstat()
                if stat.S_ISREG(info.st_mode) and info.st_size >= limit:
                    found.append(str(path.relative_to(folder)))
    return sorted(found)


def _conclude(
    session: _Session,
    proc: subprocess.Popen[bytes],
    stop_asked: bool,
    grace_s: float,
    child_out: Path | None = None,
) -> list[Path]:
    """What the child's end means: a file cut at the size limit, the logs, a cancellation, a divergence,
    its error, or a broken run."""
    try:
        returncode = proc.wait(timeout=grace_s)  # its output has ended: it has nothing more to say
    except subprocess.TimeoutExpired:
        kill_child(proc)
        returncode = proc.returncode
    limit = session.max_file_bytes
    if limit is not None and child_out is not None and (full := files_at_limit(child_out, limit)):
        names = ", ".join(repr(name[:60]) for name in full[:3])
        raise ProtocolError(
            f"the model's process wrote {limit} bytes into {names} in its output folder, the most "
            f"{FILE_BOUND} allows for one file: the file is cut there and the job is failed"
        )
    session.rewrite_finished()
    run = session.current
    if run is not None and run.divergence is not None:
        d = run.divergence
        raise TrainingDiverged(
            f"seed {run.seed}: training diverged at task {d['task']}, iteration {d['iteration']}: "
            f"{d['reason']} (lower training.lr or the strategy's regularisation); the log so far is "
            f"written to {run.path} with partial: true and diverged (the gate fails it)",
            session.save_partial(),
        )
    if session.error is not None:
        _raise_child_error(session)
    if stop_asked and not session.done():
        raise JobCancelled(session.save_partial())
    if not session.done() or returncode != 0:
        paths = session.save_partial()
        where = f" (seed {run.seed}, task {run.task})" if run is not None else ""
        exc = ProtocolError(
            f"the model's process {describe_exit(returncode)} before the job was done{where}; "
            "the log so far is kept as a partial log"
        )
        exc.paths = paths  # type: ignore[attr-defined]
        raise exc
    return list(session.written)


def _collect_models(session: _Session, child_out: Path) -> None:
    """Move the final models the child wrote (regular files, named as announced) beside the logs."""
    for run in session.finished:
        name = run.meta.get("final_model")
        if not name:
            continue
        source = child_out / name
        if source.is_symlink() or not source.is_file():
            raise ProtocolError(f"seed {run.seed}: the final model {name} was announced but not written")
        shutil.move(str(source), session.out_dir / name)


def run_job(
    spec: JobSpec,
    out_dir: Path,
    *,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    base_dir: Path | None = None,
    launcher: Launcher = local_launcher,
    threads: int = 0,
    gpu: bool = False,
    work_dir: Path | None = None,
    stop_grace_s: float = STOP_GRACE_S,
    max_file_bytes: int | None = None,
) -> list[Path]:
    """Run a job: one evaluation log per seed, ``out_dir/log-seed{seed}.json``; returns their paths.

    Relative paths in the spec (data, model, checkpoints) resolve against ``base_dir`` (default: the
    current directory). The model runs in a child started by ``launcher`` (at most ``threads`` CPU
    threads when not 0; ``gpu``: it may use the GPU devices); its inputs are staged in a temporary
    folder under ``work_dir`` (default: the system's). Raises
    :class:`~clgate.engine.errors.EngineInputError` (a ``ValueError``) for bad input, including a child
    that breaks the protocol (:class:`~clgate.engine.protocol.ProtocolError`: with ``max_file_bytes``,
    the service's ``CLGATE_SANDBOX_MAX_FILE_BYTES``, also a message header, a seed's evaluation log as
    compact JSON, or a file in the child's output folder reaching that many bytes), :class:`JobCancelled`
    when ``should_stop`` returns true, and re-raises ``KeyboardInterrupt`` — in both cases after
    writing the log so far as a valid partial log.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_dir = Path(base_dir) if base_dir is not None else None
    data = load_data(spec.data, base_dir)
    scenario = scenario_from_spec(spec.scenario, data)
    digest = data.digest(groups=scenario.kind != "nc")
    selection = select_heldout(
        scenario.test_cell,
        tasks=scenario.cells,
        n_classes=scenario.n_cells,
        subsample_per_task=spec.evaluation.subsample_per_task,
        seed=digest,
    )
    with tempfile.TemporaryDirectory(prefix="clgate-job-", dir=work_dir) as tmp:
        staging = stage_job(
            spec,
            data,
            scenario.classes,
            selection,
            Path(tmp) / "stage",
            base_dir=base_dir,
            test_cell=None if scenario.kind == "nc" else scenario.test_cell,
            train_task=scenario.train_task,
        )
        child_out = Path(tmp) / "out"
        child_out.mkdir()
        session = _Session(
            spec,
            data,
            scenario,
            staging,
            out_dir,
            progress,
            digest=digest,
            base_dir=base_dir,
            max_file_bytes=max_file_bytes,
        )
        proc = launcher(ChildLaunch(staging.folder, child_out, threads, gpu))
        return _drive(proc, session, child_out, should_stop, stop_grace_s)


def _drive(
    proc: subprocess.Popen[bytes],
    session: _Session,
    child_out: Path,
    should_stop: Callable[[], bool] | None,
    grace_s: float,
) -> list[Path]:
    """Read the child to its end and conclude; on a broken protocol or an interrupt, the child is killed
    and the log so far written (``paths`` on the exception)."""
    try:
        stop_asked = _pump(proc, session, should_stop, grace_s)
        written = _conclude(session, proc, stop_asked, grace_s, child_out)
        _collect_models(session, child_out)
    except ProtocolError as exc:
        kill_child(proc)
        if not hasattr(exc, "paths"):
            exc.paths = session.save_partial()  # type: ignore[attr-defined]
        raise
    except KeyboardInterrupt as exc:
        kill_child(proc)
        exc.paths = session.save_partial()  # type: ignore[attr-defined]
        raise
    finally:
        if proc.poll() is None:
            kill_child(proc)
    return written

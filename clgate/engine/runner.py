"""The runner: continual retraining with continual evaluation (or checkpoint evaluation), one
``clgate.evaluation-log/v1`` per seed.

Iterations count optimizer updates. A point is written every ``eval_every`` updates, at every task
end (``task_end: true``) and, with ``before_first_update``, at iteration 0. With
``first_task_learned`` the first task is not trained: its task-end point is at iteration 0.

Stopping: ``should_stop`` is polled after every update. When it returns true, the log so far is
written as a valid partial log (``partial: true``) and :class:`JobCancelled` is raised, carrying the
paths of every log written (complete logs of finished seeds, then the partial one). On
``KeyboardInterrupt`` the partial log is written the same way and the ``KeyboardInterrupt`` is
re-raised (its ``paths`` attribute set). The log file is also rewritten (partial) at every task end,
so a killed process leaves its finished tasks behind.
"""

from __future__ import annotations

import hashlib
import math
import platform
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from clgate._version import __version__
from clgate.documents import dump_log
from clgate.engine.data import Dataset, load_data, model_input
from clgate.engine.errors import EngineInputError, ModelError
from clgate.engine.evaluator import ContinualEvaluator
from clgate.engine.models import (
    apply_weights,
    build_model,
    check_output_width,
    file_digest,
    grow_head,
    inspect_model_file,
    load_exported,
    load_model,
    load_state_dict_file,
    load_torchscript,
    make_growing_head,
)
from clgate.engine.resources import SampleCost, count_params, measure_costs
from clgate.engine.samples import Samples, iterate_batches
from clgate.engine.scenario import tasks_from_spec
from clgate.engine.strategies import StrategyContext, create_strategy
from clgate.schemas.evaluation_log import EvaluationLog, TaskResources
from clgate.schemas.job import JobSpec

PROGRESS_INTERVAL_S = 0.2


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


class _Stop(Exception):
    pass


class TrainingDiverged(EngineInputError):
    """Training produced a non-finite loss or weights (a learning rate or a regularisation weight too
    large for the data). The log so far is written as a partial log that records ``diverged``; ``paths``
    are the logs written (the last one the diverged run's)."""

    def __init__(self, message: str, paths: list[Path] | None = None) -> None:
        super().__init__(message)
        self.paths = paths or []


class _Diverged(Exception):
    pass


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EngineInputError(f"device: {name!r} requested but CUDA is not available on this machine")
    if name == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise EngineInputError("device: 'mps' requested but it is not available on this machine")
    return torch.device(name)


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return p


def run_job(
    spec: JobSpec,
    out_dir: Path,
    *,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    base_dir: Path | None = None,
) -> list[Path]:
    """Run a job: one evaluation log per seed, ``out_dir/log-seed{seed}.json``; returns their paths.

    Relative paths in the spec (data, model, checkpoints) resolve against ``base_dir`` (default: the
    current directory). Raises :class:`~clgate.engine.errors.EngineInputError` (a ``ValueError``) for
    bad input, :class:`JobCancelled` when ``should_stop`` returns true, and re-raises
    ``KeyboardInterrupt`` — in both cases after writing the log so far as a valid partial log.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_dir = Path(base_dir) if base_dir is not None else None
    data = load_data(spec.data, base_dir)
    tasks = tasks_from_spec(spec.scenario, data.n_classes)
    device = resolve_device(spec.device)
    written: list[Path] = []
    shared = _SharedData(data, tasks, device)
    threads_before = torch.get_num_threads()
    if spec.cpu_threads:
        torch.set_num_threads(spec.cpu_threads)
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    try:
        # Each seed re-seeds torch's global RNG (model initialisation); the caller's RNG state is restored.
        with torch.random.fork_rng(devices=cuda_devices):
            _run_seeds(spec, shared, out_dir, base_dir, progress, should_stop, written)
    finally:
        torch.set_num_threads(threads_before)
    return written


def _run_seeds(
    spec: JobSpec,
    shared: _SharedData,
    out_dir: Path,
    base_dir: Path | None,
    progress: Callable[[Progress], None] | None,
    should_stop: Callable[[], bool] | None,
    written: list[Path],
) -> None:
    for index, seed in enumerate(spec.seeds):
        path = out_dir / f"log-seed{seed}.json"
        run = _SeedRun(spec, shared, seed, index, path, base_dir, progress, should_stop)
        try:
            run.run()
        except TrainingDiverged as exc:
            written.append(path)
            exc.paths = written
            raise
        except _Stop:
            written.append(path)
            raise JobCancelled(written) from None
        except KeyboardInterrupt as exc:
            written.append(path)
            exc.paths = written  # type: ignore[attr-defined]
            raise
        written.append(path)


class _SharedData:
    """The data for all seeds, kept on the host in its stored dtype (uint8 images stay uint8; an image
    folder stays files, decoded per batch).

    Only batches go to the device, converted to model input (float) there; the evaluation samples go
    there once, in stored dtype, and each evaluation batch is converted.
    """

    def __init__(self, data: Dataset, tasks: list[list[int]], device: torch.device) -> None:
        self.data = data
        self.tasks = tasks
        self.device = device
        self.train = Samples(data.x_train, data.y_train)
        self.task_samples = [self.train.where_label(classes) for classes in tasks]
        self.x_test = data.x_test
        self.y_test = torch.from_numpy(data.y_test)
        self.digest = data.digest()

    def example(self) -> torch.Tensor:
        """Two training samples as model input on the device (cost counting)."""
        x, _ = self.train.take([0, 1] if len(self.train) > 1 else [0])
        return model_input(x.to(self.device))


class _SeedRun:
    def __init__(
        self,
        spec: JobSpec,
        shared: _SharedData,
        seed: int,
        seed_index: int,
        path: Path,
        base_dir: Path | None,
        progress: Callable[[Progress], None] | None,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        self.spec = spec
        self.shared = shared
        self.seed = seed
        self.seed_index = seed_index
        self.path = path
        self.base_dir = base_dir
        self.progress_cb = progress
        self.should_stop = should_stop
        self.tasks = shared.tasks
        self.n_classes = shared.data.n_classes
        self.device = shared.device
        self.points: list[dict[str, Any]] = []
        self.resources: list[TaskResources] = []
        self.meta: dict[str, Any] = {}
        self.divergence: dict[str, Any] | None = None
        self.batchnorm = False
        self.iteration = 0
        self.total_iterations = 0
        self.task = 1
        self.last_eval: float | None = None
        self.started = time.monotonic()
        self.last_progress = 0.0
        use_bf16 = spec.training.precision == "bf16" and self.device.type == "cuda"
        self.precision = "bf16" if use_bf16 else "fp32"
        self.workers: int | None = getattr(spec.data, "workers", None)  # image folders' decoding processes
        self.autocast: Callable[[], Any] = (
            (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else nullcontext
        )

    # ---------------------------------------------------------------- log
    def _log(self, partial: bool) -> EvaluationLog:
        return EvaluationLog(
            class_names=self.shared.data.class_names,
            tasks=self.tasks,
            points=self.points,
            resources=self.resources if self.spec.mode == "retrain" else None,
            meta=self.meta,
            partial=partial or self.divergence is not None,
            diverged=self.divergence,
        )

    def _save(self, partial: bool) -> None:
        dump_log(self._log(partial), self.path)

    def _base_meta(self) -> dict[str, Any]:
        spec = self.spec
        data = self.shared.data
        return {
            "seed": self.seed,
            "mode": spec.mode,
            "eval_every": spec.evaluation.eval_every,
            "task_accuracy": spec.evaluation.task_accuracy,
            "before_first_update": spec.evaluation.before_first_update,
            "subsample_per_task": spec.evaluation.subsample_per_task,
            "future_tasks": spec.evaluation.future_tasks,
            "predict_over": spec.model.predict_over,
            "first_task_learned": spec.scenario.first_task_learned,
            "data": {
                "kind": spec.data.kind,
                "source": data.source,
                "sha256": self.shared.digest,
                **data.meta,
            },
            "device": str(self.device),
            "cpu_threads": torch.get_num_threads() if self.device.type == "cpu" else None,
            "eval_selection": {
                "sha256": hashlib.sha256(
                    f"{self.shared.digest}:{self.evaluator.selection_sha256}".encode()
                ).hexdigest(),
                "samples": self.evaluator.n_samples,
                "subsample_per_task": spec.evaluation.subsample_per_task,
                "stratified": spec.evaluation.subsample_per_task is not None,
            },
            "precision": self.precision,
            "versions": {
                "clgate": __version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
        }

    # ---------------------------------------------------------------- progress / evaluation
    def _report(self, force: bool = False) -> None:
        if self.progress_cb is None:
            return
        now = time.monotonic()
        if not force and now - self.last_progress < PROGRESS_INTERVAL_S:
            return
        self.last_progress = now
        self.progress_cb(
            Progress(
                seed=self.seed,
                seed_index=self.seed_index,
                n_seeds=len(self.spec.seeds),
                task=self.task,
                n_tasks=len(self.tasks),
                iteration=self.iteration,
                total_iterations=self.total_iterations,
                last_eval=self.last_eval,
                elapsed_s=now - self.started,
            )
        )

    def _diverge(self, reason: str, *, task: int, iteration: int) -> None:
        """Record where training diverged and stop this run (:meth:`run` writes the log and raises)."""
        self.divergence = {"task": task, "iteration": iteration, "reason": reason}
        raise _Diverged

    def _check_weights(self, model: torch.nn.Module, *, task: int, iteration: int) -> None:
        """Non-finite weights stop the run (checked before every evaluation: cheap at that rate)."""
        bad = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
            self._diverge(f"weights are not finite: {bad[0]}{more}", task=task, iteration=iteration)

    def _point(
        self, model: torch.nn.Module, predict: Callable, *, iteration: int, task: int, task_end: bool
    ) -> None:
        if self.spec.mode == "retrain":
            self._check_weights(model, task=task, iteration=iteration)
        correct, total = self.evaluator.evaluate(predict, model, seen_tasks=task)
        self.points.append(
            {"iteration": iteration, "task": task, "task_end": task_end, "correct": correct, "total": total}
        )
        n = sum(total)
        self.last_eval = sum(correct) / n if n else None
        self._report(force=True)

    def _make_evaluator(self) -> None:
        ev = self.spec.evaluation
        self.evaluator = ContinualEvaluator(
            self.shared.x_test,
            self.shared.y_test,
            tasks=self.tasks,
            n_classes=self.n_classes,
            device=self.device,
            subsample_per_task=ev.subsample_per_task,
            seed=self.shared.digest,
            future_tasks=ev.future_tasks,
            batch_size=ev.batch_size,
            autocast=self.autocast,
            transform=model_input,
        )

    # ---------------------------------------------------------------- run
    def run(self) -> None:
        try:
            if self.spec.mode == "evaluate":
                self._run_evaluate()
            else:
                self._run_retrain()
        except (_Stop, KeyboardInterrupt):
            self._save(partial=True)
            raise
        except _Diverged:
            self._save(partial=True)
            d = self.divergence or {}
            raise TrainingDiverged(
                f"seed {self.seed}: training diverged at task {d.get('task')}, iteration "
                f"{d.get('iteration')}: "
                f"{d.get('reason')} (lower training.lr or the strategy's regularisation); the log so far is "
                f"written to {self.path} with partial: true and diverged (the gate fails it)"
            ) from None
        self._save(partial=False)
        self._report(force=True)

    def _stop_requested(self) -> bool:
        return self.should_stop is not None and self.should_stop()

    def _run_retrain(self) -> None:
        spec, shared = self.spec, self.shared
        torch.manual_seed(self.seed)
        model, model_info = load_model(
            arch=spec.model.arch,
            weights=_resolve(spec.model.weights, self.base_dir) if spec.model.weights else None,
            torchscript=_resolve(spec.model.torchscript, self.base_dir) if spec.model.torchscript else None,
            input_shape=shared.data.input_shape,
            n_classes=self.n_classes,
            hidden=spec.model.hidden,
        )
        if spec.model.head == "growing":
            make_growing_head(model, self.n_classes)
            model_info["head"] = "growing"
        model.to(self.device)
        model.train()
        self.batchnorm = _has_batchnorm(model)
        ctx = StrategyContext(
            model=model,
            n_classes=self.n_classes,
            device=self.device,
            seed=self.seed,
            batch_size=spec.training.batch_size,
            predict_over=spec.model.predict_over,
            autocast=self.autocast,
        )
        strategy, ignored = create_strategy(spec.strategy.name, spec.strategy.params, ctx)
        example = shared.example()
        cost: SampleCost = measure_costs(model, example)
        self._make_evaluator()
        generator = torch.Generator().manual_seed(self.seed)
        learned_first = spec.scenario.first_task_learned
        sizes = [len(t) for t in shared.task_samples]
        planned = [
            0 if (k == 0 and learned_first) else self._iterations_for(strategy.expected_train_size(k, sizes))
            for k in range(len(self.tasks))
        ]
        self.total_iterations = sum(planned)
        self.meta = self._base_meta() | {
            "strategy": strategy.name,
            "strategy_params": strategy.params.model_dump(),
            **({"ignored_strategy_params": ignored} if ignored else {}),
            **model_info,
            "training": spec.training.model_dump(),
            "muladds_per_sample": {"forward": cost.forward_muladds, "train": cost.train_muladds},
            "iterations_per_task": [],
        }
        predict = ctx.logits
        tr = spec.training
        for k, classes in enumerate(self.tasks):
            self.task = k + 1
            ctx.seen[torch.tensor(classes, device=self.device)] = True
            if grow_head(model, classes):  # a growing head: this task's rows, and its larger cost
                cost = measure_costs(model, example)
            task = shared.task_samples[k]
            start_iteration = self.iteration
            train_before = strategy.extra_train_samples
            forward_before = strategy.extra_forward_samples
            trained_samples = 0
            if k == 0 and learned_first:
                strategy.learned_task(k, task)
                self._point(model, predict, iteration=0, task=1, task_end=True)
            else:
                if k == 0 and spec.evaluation.before_first_update:
                    self._point(model, predict, iteration=0, task=1, task_end=False)
                strategy.before_task(k, task)
                train = strategy.task_data(k, task)
                n = len(train)
                if n == 1 and self.batchnorm:
                    raise EngineInputError(
                        f"task {k + 1}: one training sample; a model with BatchNorm cannot train on "
                        "a batch of one"
                    )
                steps_per_epoch = self._steps_per_epoch(n)
                n_iter = self._iterations_for(n)
                self.total_iterations += n_iter - planned[k]
                planned[k] = n_iter
                optimizer = _make_optimizer(model, tr)
                eval_every = spec.evaluation.eval_every
                plan = batch_plan(n, tr.batch_size, steps_per_epoch, n_iter, generator)
                batches = iterate_batches(train, plan, self.device, workers=self.workers)
                for it, (xb, yb) in enumerate(batches):
                    with self.autocast():
                        loss = strategy.loss(xb, yb)
                    if not bool(torch.isfinite(loss)):
                        self._diverge(
                            f"loss is {float(loss.detach())}", task=k + 1, iteration=self.iteration + 1
                        )
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    strategy.after_step(xb, yb, first_pass=it < steps_per_epoch)
                    trained_samples += len(yb)
                    self.iteration += 1
                    if eval_every and self.iteration % eval_every == 0 and it != n_iter - 1:
                        self._point(model, predict, iteration=self.iteration, task=k + 1, task_end=False)
                    else:
                        self._report()
                    if self._stop_requested():
                        raise _Stop
                self._point(model, predict, iteration=self.iteration, task=k + 1, task_end=True)
            strategy.after_task(k, task)
            extra_train = strategy.extra_train_samples - train_before
            extra_forward = strategy.extra_forward_samples - forward_before
            self.meta["iterations_per_task"].append(self.iteration - start_iteration)
            self.resources.append(
                TaskResources(
                    task=k + 1,
                    model_params=count_params(model),
                    buffer_bytes=strategy.buffer_bytes(),
                    train_bytes=task.input_nbytes,
                    ops_train=(trained_samples + extra_train) * cost.train_muladds
                    + extra_forward * cost.forward_muladds,
                    ops_pass=len(task) * cost.train_muladds,
                )
            )
            if k < len(self.tasks) - 1:
                self._save(partial=True)
                if self._stop_requested():
                    raise _Stop
        if tr.save_final:
            self._save_model(model)

    def _save_model(self, model: torch.nn.Module) -> None:
        if isinstance(model, torch.jit.ScriptModule):
            target = self.path.with_name(f"model-seed{self.seed}.pt")
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=DeprecationWarning)
                torch.jit.save(model, str(target))
        else:
            from safetensors.torch import save_file

            target = self.path.with_name(f"model-seed{self.seed}.safetensors")
            save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(target))
        self.meta["final_model"] = target.name

    def _steps_per_epoch(self, n: int) -> int:
        """Batches per epoch over ``n`` samples. A BatchNorm model in training mode cannot take a batch
        of one (the batch variance is undefined): the lone last sample joins the previous batch."""
        bs = self.spec.training.batch_size
        if self.batchnorm and n > 1 and n % bs == 1:
            return n // bs
        return math.ceil(n / bs)

    def _iterations_for(self, n: int) -> int:
        tr = self.spec.training
        if tr.iterations is not None:
            return tr.iterations
        return tr.epochs * self._steps_per_epoch(n)

    # ---------------------------------------------------------------- evaluate mode
    def _run_evaluate(self) -> None:
        spec = self.spec
        plan = plan_checkpoints(spec, len(self.tasks))
        self._make_evaluator()
        self.total_iterations = plan[-1][1]
        self.meta = self._base_meta() | {"strategy": "evaluate", "checkpoints": []}
        seen = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        mask_all = spec.model.predict_over == "all"
        for path_text, iteration, task, task_end in plan:
            path = _resolve(path_text, self.base_dir)
            model = self._load_checkpoint(path)
            model.to(self.device)
            for classes in self.tasks[:task]:
                seen[torch.tensor(classes, device=self.device)] = True

            def predict(x: torch.Tensor, model: torch.nn.Module = model) -> torch.Tensor:
                out = model(x)
                return out if mask_all else out.masked_fill(~seen, float("-inf"))

            self.task = task
            self.iteration = iteration
            self._point(model, predict, iteration=iteration, task=task, task_end=task_end)
            self.meta["checkpoints"].append(
                {"path": str(path), "sha256": file_digest(path), "iteration": iteration}
            )
            if self._stop_requested():
                raise _Stop

    def _load_checkpoint(self, path: Path) -> torch.nn.Module:
        if not path.is_file():
            raise ModelError(f"{path}: no such checkpoint file")
        kind = inspect_model_file(path)
        shape = self.shared.data.input_shape
        if kind == "torchscript":
            model = load_torchscript(path)
        elif kind == "export":
            model = load_exported(path)
        else:
            if self.spec.model.arch is None:
                raise ModelError(f"{path}: a weights file ({kind}) needs model.arch in the job spec")
            model = build_model(self.spec.model.arch, shape, self.n_classes, hidden=self.spec.model.hidden)
            if self.spec.model.head == "growing":  # its rows are rebuilt from the checkpoint's shapes
                make_growing_head(model, self.n_classes)
            apply_weights(model, load_state_dict_file(path), str(path))
        check_output_width(model, shape, self.n_classes, str(path))
        return model


def batch_plan(
    n: int, batch_size: int, steps_per_epoch: int, n_iter: int, generator: torch.Generator
) -> Iterator[torch.Tensor]:
    """The positions of each of ``n_iter`` updates over ``n`` samples: a fresh permutation per epoch of
    ``steps_per_epoch`` batches (drawn from ``generator`` when the epoch starts); the last batch of an
    epoch takes its remainder (one sample more than a batch when a lone sample would be left for a
    BatchNorm model, see ``_SeedRun._steps_per_epoch``).

    >>> [p.tolist() for p in batch_plan(5, 2, 2, 3, torch.Generator().manual_seed(0))]
    [[4, 0], [1, 3, 2], [3, 4]]
    """
    perm = torch.empty(0, dtype=torch.long)
    for it in range(n_iter):
        pos = it % steps_per_epoch
        if pos == 0:
            perm = torch.randperm(n, generator=generator)
        last = pos == steps_per_epoch - 1
        yield perm[pos * batch_size :] if last else perm[pos * batch_size : (pos + 1) * batch_size]


def plan_checkpoints(spec: JobSpec, n_tasks: int) -> list[tuple[str, int, int, bool]]:
    """``(path, iteration, task, task_end)`` for each checkpoint of an evaluate-mode job.

    Without iterations there must be one checkpoint per task end (iteration = task number). With
    iterations (all of them), each checkpoint's task is given (``PATH@ITERATION:TASK``) or, with one
    checkpoint per task, implied; the last checkpoint of each task is its task end.
    """
    cks = spec.checkpoints or []
    with_iter = [c.iteration is not None for c in cks]
    if not any(with_iter):
        if len(cks) != n_tasks:
            raise EngineInputError(
                f"checkpoints: {len(cks)} given for {n_tasks} tasks; give one per task end, "
                "or more with their iterations (PATH@ITERATION:TASK)"
            )
        return [(c.path, k + 1, k + 1, True) for k, c in enumerate(cks)]
    if not all(with_iter):
        raise EngineInputError(
            "checkpoints: give an iteration for every checkpoint (PATH@ITERATION) or for none"
        )
    tasks = [c.task for c in cks]
    if any(t is None for t in tasks):
        if len(cks) != n_tasks or any(t is not None for t in tasks):
            raise EngineInputError(
                "checkpoints: with more checkpoints than tasks, give each one's task (PATH@ITERATION:TASK)"
            )
        tasks = list(range(1, n_tasks + 1))
    iterations = [c.iteration for c in cks]
    for i in range(1, len(cks)):
        if iterations[i] <= iterations[i - 1]:  # type: ignore[operator]
            raise EngineInputError(
                f"checkpoints[{i}]: iteration {iterations[i]} is not after {iterations[i - 1]}"
            )
        if tasks[i] < tasks[i - 1]:  # type: ignore[operator]
            raise EngineInputError(f"checkpoints[{i}]: task {tasks[i]} comes after task {tasks[i - 1]}")
    missing = sorted(set(range(1, n_tasks + 1)) - set(tasks))  # type: ignore[arg-type]
    if missing:
        raise EngineInputError(
            f"checkpoints: no checkpoint for task(s) {missing} (each task needs its task-end checkpoint)"
        )
    if max(tasks) > n_tasks:  # type: ignore[type-var]
        raise EngineInputError(f"checkpoints: task {max(tasks)} does not exist ({n_tasks} tasks)")  # type: ignore[type-var]
    last = {t: i for i, t in enumerate(tasks)}
    return [(c.path, c.iteration, tasks[i], last[tasks[i]] == i) for i, c in enumerate(cks)]  # type: ignore[misc]


def _has_batchnorm(model: torch.nn.Module) -> bool:
    """Whether ``model`` normalises over the batch in training mode (built-in or TorchScript)."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            return True
        if "BatchNorm" in str(getattr(m, "original_name", "")):
            return True
    return False


def _make_optimizer(model: torch.nn.Module, tr: Any) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if tr.optimizer == "adam":
        return torch.optim.Adam(params, lr=tr.lr, weight_decay=tr.weight_decay)
    return torch.optim.SGD(params, lr=tr.lr, momentum=tr.momentum, weight_decay=tr.weight_decay)

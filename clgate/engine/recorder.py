"""The recorder: continual evaluation of *your own* training loop, written as a ``clgate.evaluation-log/v1``.

A team that already trains its model (a plain PyTorch loop, Lightning, Avalanche …) adds three calls
and gets the same log ``clgate run`` writes, ready for ``clgate metrics`` and ``clgate gate``::

    recorder = Recorder(x_test, y_test, tasks=[[0, 1], [2, 3]], eval_every=50)
    for task in tasks:
        for xb, yb in batches(task):
            ...                                  # forward, loss, backward, optimizer.step()
            recorder.step(model, samples=len(yb))  # counts the update; evaluates every 50
        recorder.task_end(model)                 # the task-end point
    recorder.save("log.json")

It holds the held-out samples of every class and the task layout, and evaluates with the engine's
device-resident :class:`~clgate.engine.evaluator.ContinualEvaluator` (per-class correct/total counts,
so every Wilson-bound rule of a policy works). An update that falls on an evaluation point and is
also the task's last one is evaluated once: :meth:`Recorder.task_end` marks that point as the task end
instead of evaluating the same weights again — the engine's own rule.

Predictions are restricted to the classes of the tasks seen so far (``predict_over="seen"``, the
engine's default for class-incremental heads) or use every output (``"all"``).

New instances (``scenario="ni"``) and mixed (``"nic"``) scenarios take the job spec's words: each
task is a sample group (``groups``, in training order), ``group_test`` says each held-out sample's
group, and in NIC ``classes`` lists the classes each task brings. The log is then over cells
(task k, class c), with ``scenario``, ``class_of`` and ``groups``, as the engine writes it::

    recorder = Recorder(x_test, y_test, scenario="ni", group_test=g_test, groups=["day", "night"])

>>> import torch
>>> x = torch.randn(40, 3); y = torch.arange(40) % 4
>>> rec = Recorder(x, y, tasks=[[0, 1], [2, 3]], eval_every=2, device="cpu")
>>> model = torch.nn.Linear(3, 4)
>>> for task in range(2):
...     for _ in range(3):
...         _ = rec.step(model, samples=8)
...     rec.task_end(model, train_size=24, train_bytes=24 * 3 * 4)
>>> [(p.iteration, p.task, p.task_end) for p in rec.log().points]
[(2, 1, False), (3, 1, True), (4, 2, False), (6, 2, True)]
>>> rec.log().points[-1].total
[10, 10, 10, 10]
>>> g = ["day"] * 20 + ["night"] * 20  # the sample group of each held-out sample
>>> ni = Recorder(x, y, scenario="ni", group_test=g, groups=["night", "day"], device="cpu")
>>> ni.tasks, ni.task_classes[1]
([[0, 1, 2, 3], [4, 5, 6, 7]], [0, 1, 2, 3])
>>> for task in range(2):
...     _ = ni.step(model, samples=8)
...     ni.task_end(model)
>>> log = ni.log()
>>> log.scenario, log.class_of, log.groups, log.points[0].total
('ni', [0, 1, 2, 3, 0, 1, 2, 3], ['night', 'day'], [5, 5, 5, 5, 0, 0, 0, 0])
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import ValidationError
from torch import nn

from clgate._version import __version__
from clgate.engine.errors import EngineInputError
from clgate.engine.evaluator import ContinualEvaluator
from clgate.engine.resources import SampleCost, count_params, measure_costs
from clgate.engine.scenario import Scenario, check_cover
from clgate.engine.schedule import resolve_device
from clgate.logfile import LogFormat, write_log
from clgate.schemas.errors import problems_of
from clgate.schemas.evaluation_log import EvalPoint, EvaluationLog, TaskResources
from clgate.schemas.job import ScenarioSpec

Logits = Callable[[nn.Module, torch.Tensor], torch.Tensor]
ScenarioKind = Literal["nc", "ni", "nic"]


def _as_tensor(a: Any, what: str) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.detach()
    try:
        return torch.from_numpy(np.ascontiguousarray(a))
    except (TypeError, ValueError) as exc:
        raise EngineInputError(f"{what}: not an array or tensor ({exc})") from None


class Recorder:
    """Evaluates a model during *your* class-incremental training and writes the evaluation log.

    ``x_test``/``y_test``: the held-out samples (numpy arrays or tensors; inputs as the model takes
    them, labels ``0 … C-1``) of every class. ``tasks``: the class groups in training order (every
    class in exactly one). ``scenario``: ``"nc"`` (new classes, the default: ``tasks``), ``"ni"`` (new
    instances: each task is a sample group of every class) or ``"nic"`` (each task brings the classes
    ``classes[k]`` of group ``groups[k]``); ``group_test``: each held-out sample's group (names or
    integer ids, as an NPZ's ``group_test``); ``groups``: the group of each task, in training order
    (NI default: the groups of ``group_test``, sorted). ``eval_every``: an evaluation point every
    that many updates (``None``: task ends only). ``subsample_per_task``: a fixed, seeded subsample
    of that many evaluation samples per task (see docs/recorder.md for choosing it).
    ``logits(model, x)``: how to get logits from the model (default ``model(x)``). ``transform``:
    applied to each evaluation batch on the device (e.g. :func:`clgate.engine.data.model_input` for
    uint8 images kept as stored). ``meta``: anything to keep in the log's ``meta`` (strategy,
    hyper-parameters …).
    """

    def __init__(
        self,
        x_test: Any,
        y_test: Any,
        *,
        tasks: Sequence[Sequence[int]] | None = None,
        scenario: ScenarioKind = "nc",
        group_test: Any = None,
        groups: Sequence[str | int] | None = None,
        classes: Sequence[Sequence[int]] | None = None,
        class_names: Sequence[str] | None = None,
        eval_every: int | None = None,
        predict_over: Literal["seen", "all"] = "seen",
        subsample_per_task: int | None = None,
        future_tasks: bool = False,
        seed: int = 0,
        device: str | torch.device | None = None,
        batch_size: int | None = None,
        precision: Literal["fp32", "bf16"] = "fp32",
        logits: Logits | None = None,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        x, y = _checked_samples(x_test, y_test)
        layout = _scenario_of(y, scenario, tasks, group_test, groups, classes, class_names)
        n_classes = len({c for t in layout.classes for c in t})
        self.scenario: ScenarioKind = scenario
        self._layout = layout
        self.tasks = layout.cells  # the log's tasks: class ids (NC) or cell ids (NI/NIC)
        self.task_classes = layout.classes  # the classes each task trains on
        _check_options(
            n_classes,
            class_names=class_names,
            eval_every=eval_every,
            subsample_per_task=subsample_per_task,
            batch_size=batch_size,
            predict_over=predict_over,
            precision=precision,
        )
        self.device: torch.device | None = (
            device if isinstance(device, torch.device) or device is None else resolve_device(device)
        )
        self.n_classes = n_classes
        self.class_names = list(class_names) if class_names is not None else None
        self.eval_every = eval_every
        self.predict_over = predict_over
        self._requested_precision = precision
        self._evaluator_args = _evaluator_arguments(
            layout,
            subsample_per_task=subsample_per_task,
            seed=seed,
            future_tasks=future_tasks,
            batch_size=batch_size,
            transform=transform,
        )
        self._x, self._y = x, y
        self._evaluator: ContinualEvaluator | None = None
        self._logits = logits
        self._seen = torch.zeros(n_classes, dtype=torch.bool)
        self._seen[self.task_classes[0]] = True
        self.iteration = 0
        self.task = 1  # 1-based task being trained
        self.points: list[EvalPoint] = []
        self.resources: list[TaskResources] | None = []
        self.last_accuracy: float | None = None
        self._task_samples = 0
        self._task_samples_known = True
        self._task_start_iteration = 0
        self._iterations_per_task: list[int] = []
        self._costs: list[dict[str, float]] = []
        self.meta: dict[str, Any] = _run_meta(
            layout,
            seed=seed,
            eval_every=eval_every,
            subsample_per_task=subsample_per_task,
            future_tasks=future_tasks,
            predict_over=predict_over,
        ) | dict(meta or {})

    # ---------------------------------------------------------------- the three calls
    def step(self, model: nn.Module, *, samples: int | None = None) -> bool:
        """Count one optimizer update (call it after ``optimizer.step()``); evaluate when one is due.

        ``samples``: training samples in the update's batch (counted for the resource figures).
        Returns whether an evaluation point was written.
        """
        self._check_open()
        self.iteration += 1
        if samples is None:
            self._task_samples_known = False
        else:
            if samples < 0:
                raise EngineInputError(f"samples: must be ≥ 0, got {samples}")
            self._task_samples += int(samples)
        if self.eval_every and self.iteration % self.eval_every == 0:
            self._point(model, task_end=False)
            return True
        return False

    def start(self, model: nn.Module) -> None:
        """An evaluation before the first update (iteration 0), the engine's ``before_first_update``."""
        self._check_open()
        if self.points or self.iteration:
            raise EngineInputError("start: call it once, before the first update")
        self.meta["before_first_update"] = True
        self._point(model, task_end=False)

    def task_end(
        self,
        model: nn.Module,
        *,
        train_size: int | None = None,
        train_bytes: int | None = None,
        buffer_bytes: int = 0,
        extra_train_samples: int = 0,
    ) -> None:
        """Close the current task with its task-end point and move to the next task.

        Resources (for the efficiency criteria) are recorded when ``train_size`` (samples in the
        task's training set) and ``train_bytes`` (their bytes) are given and every :meth:`step` of
        the task gave ``samples``; ``buffer_bytes`` is the replay memory after the task and
        ``extra_train_samples`` the samples trained outside the counted batches (replay …).
        A task with no update is allowed only as the first one (a model that already knows it).
        """
        self._check_open()
        last = self.points[-1] if self.points else None
        if last is not None and last.task_end and last.iteration == self.iteration:
            raise EngineInputError(
                f"task_end: no update since task {last.task} ended at iteration {self.iteration} "
                "(every task after the first needs at least one update)"
            )
        if last is not None and last.iteration == self.iteration and last.task == self.task:
            last.task_end = True  # same weights already evaluated at this iteration
        else:
            self._point(model, task_end=True)
        self._iterations_per_task.append(self.iteration - self._task_start_iteration)
        self._record_resources(model, train_size, train_bytes, buffer_bytes, extra_train_samples)
        self.task += 1
        self._task_start_iteration = self.iteration
        self._task_samples = 0
        self._task_samples_known = True
        if self.task <= len(self.tasks):
            self._seen[self.task_classes[self.task - 1]] = True

    def log(self) -> EvaluationLog:
        """The evaluation log so far (``partial`` until every task has ended); validated."""
        finished = self.task > len(self.tasks)
        return EvaluationLog(
            **self._layout.log_fields(),  # none in NC: its log is as it always was
            class_names=self.class_names,
            tasks=self.tasks,
            points=[p.model_copy() for p in self.points],
            resources=list(self.resources) if self.resources and finished else None,
            meta=self.meta
            | {
                "iterations_per_task": list(self._iterations_per_task),
                **({"muladds_per_sample": self._costs} if self._costs else {}),
            },
            partial=not finished,
        )

    def save(self, path: str | Path, *, format: LogFormat = "auto") -> Path:
        """Write the log (JSON) to ``path``; a log before the last task end is marked ``partial``.

        ``format`` as :func:`clgate.logfile.write_log`: ``auto`` adds the ``.npz`` companion beside a
        long log, ``npz`` writes only the binary encoding (give a ``.npz`` path).
        """
        path = Path(path)
        write_log(self.log(), path, format=format)
        return path

    # ---------------------------------------------------------------- helpers
    @property
    def evaluator(self) -> ContinualEvaluator:
        """The continual evaluator (its samples go to the device at the first evaluation)."""
        if self._evaluator is None:
            raise EngineInputError(
                "recorder: no evaluation yet (the device is the model's, known at the first one)"
            )
        return self._evaluator

    def _evaluator_for(self, model: nn.Module) -> ContinualEvaluator:
        if self._evaluator is None:
            if self.device is None:
                first: torch.Tensor | None = next(iter(model.parameters()), None)
                first = first if first is not None else next(iter(model.buffers()), None)
                self.device = first.device if first is not None else torch.device("cpu")
            use_bf16 = self._requested_precision == "bf16" and self.device.type == "cuda"
            self.precision = "bf16" if use_bf16 else "fp32"
            autocast: Callable[[], Any] = (
                (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_bf16 else nullcontext
            )
            self._evaluator = ContinualEvaluator(
                self._x, self._y, device=self.device, autocast=autocast, **self._evaluator_args
            )
            self._seen = self._seen.to(self.device)
            self.meta.update(device=str(self.device), precision=self.precision)
            del self._x, self._y  # the evaluator holds (its subsample of) them
        return self._evaluator

    @property
    def finished(self) -> bool:
        return self.task > len(self.tasks)

    def _check_open(self) -> None:
        if self.finished:
            raise EngineInputError(
                f"recorder: all {len(self.tasks)} tasks have ended; nothing more to record"
            )

    def _predict(self, model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        def predict(x: torch.Tensor) -> torch.Tensor:
            out = self._logits(model, x) if self._logits is not None else model(x)
            if out.ndim != 2 or out.shape[1] < self.n_classes:
                raise EngineInputError(
                    f"model output: expected logits of shape (batch, ≥{self.n_classes}), got "
                    f"{tuple(out.shape)}"
                )
            out = out[:, : self.n_classes]
            return out if self.predict_over == "all" else out.masked_fill(~self._seen, float("-inf"))

        return predict

    def _point(self, model: nn.Module, *, task_end: bool) -> None:
        evaluator = self._evaluator_for(model)
        correct, total = evaluator.evaluate(self._predict(model), model, seen_tasks=self.task)
        self.points.append(
            EvalPoint(
                iteration=self.iteration, task=self.task, task_end=task_end, correct=correct, total=total
            )
        )
        n = sum(total)
        self.last_accuracy = sum(correct) / n if n else None

    def _record_resources(
        self,
        model: nn.Module,
        train_size: int | None,
        train_bytes: int | None,
        buffer_bytes: int,
        extra_train_samples: int,
    ) -> None:
        if self.resources is None:
            return
        if min(train_size or 0, train_bytes or 0, buffer_bytes, extra_train_samples) < 0:
            raise EngineInputError(
                "task_end: train_size, train_bytes, buffer_bytes, extra_train_samples must be ≥ 0"
            )
        if train_size is None or train_bytes is None:
            self.resources = None  # resources of every task or of none
            return
        trained = self.iteration > self._task_start_iteration
        if trained and not self._task_samples_known:
            raise EngineInputError(
                f"task_end: resources of task {self.task} need the batch size of every update "
                "(step(model, samples=len(batch)))"
            )
        example = self.evaluator.x[:2]
        if self.evaluator.transform is not None:
            example = self.evaluator.transform(example)
        cost: SampleCost = measure_costs(model, example)
        self._costs.append({"forward": cost.forward_muladds, "train": cost.train_muladds})
        self.resources.append(
            TaskResources(
                task=self.task,
                model_params=count_params(model),
                buffer_bytes=int(buffer_bytes),
                train_bytes=int(train_bytes),
                ops_train=(self._task_samples + extra_train_samples) * cost.train_muladds,
                ops_pass=int(train_size) * cost.train_muladds,
            )
        )


def _evaluator_arguments(layout: Scenario, **options: Any) -> dict[str, Any]:
    """The :class:`ContinualEvaluator`'s arguments but the samples and the device: over the log's
    columns (classes in NC; cells in NI/NIC, where a right prediction counts in its sample's cell)."""
    args = {"tasks": layout.cells, "n_classes": layout.n_cells, **options}
    if layout.kind != "nc":
        args["cells"] = torch.from_numpy(layout.test_cell)
    return args


def _run_meta(layout: Scenario, *, seed: int, **options: Any) -> dict[str, Any]:
    """The log's ``meta`` at the start: the options, the versions, and an NI/NIC run's scenario (as the
    engine writes it; an NC log's ``meta`` is as it always was)."""
    return {
        "recorder": True,
        "seed": seed,
        **options,
        "versions": {
            "clgate": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        **({"scenario": {"type": layout.kind, "groups": layout.groups}} if layout.kind != "nc" else {}),
    }


def _checked_samples(x_test: Any, y_test: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out inputs and labels as tensors (labels as int64), of the same length."""
    x = _as_tensor(x_test, "x_test")
    y = _as_tensor(y_test, "y_test")
    if y.ndim != 1 or y.dtype.is_floating_point or y.dtype == torch.bool:
        raise EngineInputError(f"y_test: expected a 1-D integer label array, got {tuple(y.shape)} {y.dtype}")
    if len(x) != len(y):
        raise EngineInputError(f"x_test/y_test: {len(x)} inputs but {len(y)} labels")
    return x, y.long()


def _scenario_of(
    y: torch.Tensor,
    scenario: str,
    tasks: Sequence[Sequence[int]] | None,
    group_test: Any,
    groups: Sequence[str | int] | None,
    classes: Sequence[Sequence[int]] | None,
    class_names: Sequence[str] | None,
) -> Scenario:
    """The task layout the arguments declare, each argument checked for its scenario."""
    if scenario == "nc":
        _refuse_group_arguments(group_test=group_test, groups=groups, classes=classes)
        return _nc_scenario(y, tasks)
    if scenario not in ("ni", "nic"):
        raise EngineInputError(f"scenario: 'nc', 'ni' or 'nic', got {scenario!r}")
    if tasks is not None:
        hint = (
            "groups=[…], and classes=[…] for the classes each brings" if scenario == "nic" else "groups=[…]"
        )
        raise EngineInputError(
            f"tasks: only for scenario 'nc'; a {scenario} scenario's tasks are its sample groups ({hint})"
        )
    return _group_scenario(
        y, kind=scenario, group_test=group_test, groups=groups, classes=classes, class_names=class_names
    )


def _nc_scenario(y: torch.Tensor, tasks: Sequence[Sequence[int]] | None) -> Scenario:
    """The class groups, checked: every class of the tasks is covered once and has held-out samples."""
    if tasks is None:
        raise EngineInputError("tasks: required for scenario 'nc' (the class groups in training order)")
    groups = [[int(c) for c in g] for g in tasks]
    n_classes = sum(len(g) for g in groups)
    if not groups or n_classes == 0:
        raise EngineInputError("tasks: at least one task with at least one class is required")
    if any(not g for g in groups):
        raise EngineInputError("tasks: a task must hold at least one class")
    check_cover([c for g in groups for c in g], n_classes, "tasks")
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise EngineInputError(f"y_test: labels must be 0 … {n_classes - 1} (the classes of tasks)")
    missing = sorted(set(range(n_classes)) - set(torch.unique(y).tolist()))
    if missing:
        raise EngineInputError(
            f"y_test: class(es) {missing} have no held-out samples (every class needs some)"
        )
    return Scenario("nc", groups, groups, y.cpu().numpy())


def _refuse_group_arguments(**given: Any) -> None:
    for name, value in given.items():
        if value is not None:
            raise EngineInputError(
                f"{name}: only for scenario 'ni' or 'nic' (sample groups); this recorder's scenario is 'nc'"
            )


def _group_array(group_test: Any, n: int) -> np.ndarray:
    """``group_test`` as a 1-D array of integer ids or strings, one per held-out sample."""
    if isinstance(group_test, torch.Tensor):
        g = group_test.detach().cpu().numpy()
    else:
        g = np.asarray(group_test)
    if g.dtype.kind == "O" and all(isinstance(v, str) for v in g.ravel().tolist()):
        g = g.astype(str)
    if g.dtype.kind == "S":
        g = np.char.decode(g, "utf-8")
    if g.ndim != 1 or g.dtype.kind not in "iuU":
        raise EngineInputError(
            "group_test: expected a 1-D array of group names (strings) or integer ids, "
            f"got {g.dtype} {g.shape}"
        )
    if len(g) != n:
        raise EngineInputError(f"group_test: {len(g)} groups for {n} held-out samples (one per sample)")
    return g


def _checked_spec(
    kind: str, order: list[str], classes: Sequence[Sequence[int]] | None, *, named: bool
) -> ScenarioSpec:
    """The job spec's rules for groups and classes (names, repeats, what a group brings twice)."""
    try:
        return ScenarioSpec(
            type=kind,  # type: ignore[arg-type]
            groups=order,
            classes=[list(t) for t in classes] if classes is not None else None,
        )
    except ValidationError as exc:
        problems = problems_of(exc)
        if not named:  # the names came from group_test
            problems = [p.replace("groups:", "group_test:", 1) for p in problems]
        raise EngineInputError(problems) from None


def _group_scenario(
    y: torch.Tensor,
    *,
    kind: str,
    group_test: Any,
    groups: Sequence[str | int] | None,
    classes: Sequence[Sequence[int]] | None,
    class_names: Sequence[str] | None,
) -> Scenario:
    """The cells of an NI/NIC scenario: task k's cells are the classes it brings on group ``groups[k]``,
    numbered in task order; each held-out sample's cell (``-1``: in no task). As the engine's
    :func:`~clgate.engine.scenario.scenario_from_spec` makes them from a job's data."""
    if group_test is None:
        raise EngineInputError(f"group_test: required for scenario {kind!r} (each held-out sample's group)")
    if kind == "ni" and classes is not None:
        raise EngineInputError("classes: only for scenario 'nic' (in ni every task brings every class)")
    g = _group_array(group_test, len(y))
    values, group_id = np.unique(g, return_inverse=True)
    names = [str(v) for v in values.tolist()]
    order = names if groups is None else [str(name) for name in groups]
    spec = _checked_spec(kind, order, classes, named=groups is not None)
    unknown = [name for name in order if name not in names]
    if unknown:
        raise EngineInputError(
            f"groups: no sample group {unknown[0]!r} in group_test (its groups: {_listed(names)})"
        )
    labels = y.cpu().numpy()
    if not len(labels):
        raise EngineInputError("y_test: no held-out samples")
    task_classes = _task_classes(kind, spec, labels, class_names, len(order))
    index = {name: i for i, name in enumerate(names)}
    test_cell = np.full(len(labels), -1, dtype=np.int64)
    cells: list[list[int]] = []
    class_of: list[int] = []
    for k, (name, brought) in enumerate(zip(order, task_classes, strict=True)):
        ids = []
        for c in brought:
            rows = (group_id == index[name]) & (labels == c)
            if not rows.any():
                label = class_names[c] if class_names is not None else str(c)
                raise EngineInputError(
                    f"group_test: task {k + 1} (group {name!r}) has no held-out sample of class {label!r} "
                    "(every cell, a class on a task's group, needs held-out samples)"
                )
            test_cell[rows] = len(class_of)
            ids.append(len(class_of))
            class_of.append(c)
        cells.append(ids)
    return Scenario(kind, task_classes, cells, test_cell, class_of, order)


def _task_classes(
    kind: str, spec: ScenarioSpec, labels: np.ndarray, class_names: Sequence[str] | None, n_tasks: int
) -> list[list[int]]:
    """The classes each task brings: every class in NI, ``classes[k]`` in NIC; the labels checked."""
    brought = [list(map(int, t)) for t in spec.classes] if spec.classes is not None else []
    highest = max([int(labels.max()), *(c for t in brought for c in t)])
    n_classes = len(class_names) if class_names is not None else highest + 1
    if int(labels.min()) < 0 or int(labels.max()) >= n_classes:
        raise EngineInputError(f"y_test: labels must be 0 … {n_classes - 1} (the classes of class_names)")
    if kind == "ni":
        return [list(range(n_classes)) for _ in range(n_tasks)]
    check_cover([c for t in brought for c in t], n_classes, "classes", of="y_test", once=False)
    return brought


def _listed(names: list[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f", … ({len(names)} in all)" if len(names) > limit else "")


def _check_options(
    n_classes: int,
    *,
    class_names: Sequence[str] | None,
    eval_every: int | None,
    subsample_per_task: int | None,
    batch_size: int | None,
    predict_over: str,
    precision: str,
) -> None:
    """The recorder's options, each refused with its name and the reason."""
    if class_names is not None and len(class_names) != n_classes:
        raise EngineInputError(f"class_names: {len(class_names)} names for {n_classes} classes")
    if eval_every is not None and eval_every < 1:
        raise EngineInputError(f"eval_every: must be ≥ 1 or None, got {eval_every}")
    if subsample_per_task is not None and subsample_per_task < 1:
        raise EngineInputError(f"subsample_per_task: must be ≥ 1 or None, got {subsample_per_task}")
    if batch_size is not None and batch_size < 1:
        raise EngineInputError(f"batch_size: must be ≥ 1, got {batch_size}")
    if predict_over not in ("seen", "all"):
        raise EngineInputError(f"predict_over: 'seen' or 'all', got {predict_over!r}")
    if precision not in ("fp32", "bf16"):
        raise EngineInputError(f"precision: 'fp32' or 'bf16', got {precision!r}")

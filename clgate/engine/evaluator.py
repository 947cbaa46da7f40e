"""The continual evaluator: per-class correct/total counts of a model on the held-out classes.

The evaluation samples of every task (optionally a fixed subsample per task, stratified by class and
seeded from the data, see :func:`stratified_subsample`) are put on the
device **once**, ordered by task, so that "the tasks seen so far" is a prefix of one tensor — no
gathering, no DataLoader. An evaluation is a few large batches under ``torch.inference_mode()``; the
per-class correct counts accumulate on the device with one ``scatter_add_`` per batch and come back to
the host with a single transfer. The model's train/eval mode is restored afterwards; nothing random
is drawn, so RNG streams are untouched, and eval mode leaves BatchNorm statistics alone.

>>> import torch
>>> x = torch.randn(12, 3); y = torch.tensor([0, 1, 2, 3] * 3)
>>> ev = ContinualEvaluator(x, y, tasks=[[0, 1], [2, 3]], n_classes=4, device=torch.device("cpu"))
>>> model = torch.nn.Linear(3, 4)
>>> correct, total = ev.evaluate(lambda x: model(x), model, seen_tasks=1)
>>> total
[3, 3, 0, 0]
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from clgate.engine.errors import EngineInputError
from clgate.engine.samples import ImageFiles


def stratified_subsample(
    y: np.ndarray, classes: list[int], size: int, rng: np.random.Generator, *, task: int
) -> np.ndarray:
    """``size`` indices of ``y`` over ``classes``, each class its share (largest remainder) and at least
    one sample; sorted. Raises :class:`EngineInputError` naming the class that cannot have one.

    >>> y = np.array([0] * 8 + [1] * 2)
    >>> idx = stratified_subsample(y, [0, 1], 5, np.random.default_rng(0), task=1)
    >>> np.bincount(y[idx]).tolist()
    [4, 1]
    """
    pools = [np.flatnonzero(y == c) for c in classes]
    empty = [c for c, pool in zip(classes, pools, strict=True) if len(pool) == 0]
    if empty:
        raise EngineInputError(f"data: class {empty[0]} (task {task}) has no test sample to evaluate")
    if size < len(classes):
        raise EngineInputError(
            f"evaluation.subsample_per_task: {size} sample(s) for task {task}'s {len(classes)} classes; "
            f"each class needs at least one (give at least {len(classes)}, or null for every test sample)"
        )
    counts = np.array([len(pool) for pool in pools])
    if size >= counts.sum():
        return np.sort(np.concatenate(pools))
    # each class one sample, the rest shared in proportion to the class's test samples
    share = (size - len(classes)) * (counts - 1) / max(1, int((counts - 1).sum()))
    take = 1 + np.floor(share).astype(int)
    rest = size - int(take.sum())
    order = np.argsort(-(share - np.floor(share)), kind="stable")
    for j in order[:rest]:
        take[j] += 1
    take = np.minimum(take, counts)
    picked = [rng.choice(pool, size=int(n), replace=False) for pool, n in zip(pools, take, strict=True)]
    return np.sort(np.concatenate(picked))


@dataclass(frozen=True)
class HeldoutSelection:
    """Which held-out samples are evaluated: ``indices`` into the test set, ordered by task (the samples
    of tasks ``0 … k`` are the first ``ends[k]``), the per-class ``totals`` over tasks ``0 … k``, and the
    ``sha256`` of the indices (provenance)."""

    indices: np.ndarray
    ends: list[int]
    totals: list[list[int]]
    sha256: str


def select_heldout(
    y_test: np.ndarray,
    *,
    tasks: list[list[int]],
    n_classes: int,
    subsample_per_task: int | None = None,
    seed: int | str = 0,
) -> HeldoutSelection:
    """The evaluation samples of every task (or a fixed, ``seed``-drawn stratified subsample of each).

    The selection depends on the data (callers pass the data digest as ``seed``), never on the training
    seed: every seed of a job, and a candidate and its baseline on the same data, see the same samples.

    >>> s = select_heldout(np.array([0, 1, 2, 3, 0, 1]), tasks=[[0, 1], [2, 3]], n_classes=4)
    >>> s.indices.tolist(), s.ends, s.totals
    ([0, 1, 4, 5, 2, 3], [4, 6], [[2, 2, 0, 0], [2, 2, 1, 1]])
    """
    if isinstance(seed, str):
        seed = int(hashlib.sha256(seed.encode()).hexdigest()[:16], 16)
    rng = np.random.default_rng(seed)
    parts: list[np.ndarray] = []
    ends: list[int] = []
    totals: list[list[int]] = []
    running = np.zeros(n_classes, dtype=np.int64)
    count = 0
    for k, classes in enumerate(tasks):
        idx = np.flatnonzero(np.isin(y_test, classes))
        if subsample_per_task is not None:
            idx = stratified_subsample(y_test, classes, subsample_per_task, rng, task=k + 1)
        parts.append(idx)
        count += len(idx)
        running += np.bincount(y_test[idx], minlength=n_classes)
        ends.append(count)
        totals.append(running.tolist())
    selected = np.concatenate(parts).astype(np.int64)
    return HeldoutSelection(selected, ends, totals, hashlib.sha256(selected.tobytes()).hexdigest())


#: input values per evaluation batch: small on the CPU (cache-sized batches are fastest per sample),
#: large on accelerators (few launches), so activations stay bounded for large inputs.
EVAL_BUDGET = {"cpu": 1 << 18, "accelerator": 1 << 24}


def auto_batch_size(sample_shape: tuple[int, ...], device: torch.device) -> int:
    """An evaluation batch for inputs of ``sample_shape`` on ``device``: a power of two in 16 … 4096.

    >>> auto_batch_size((1, 8, 8), torch.device("cpu")), auto_batch_size((3, 32, 32), torch.device("cpu"))
    (4096, 64)
    >>> auto_batch_size((3, 224, 224), torch.device("cuda"))
    64
    """
    values = max(1, math.prod(sample_shape))
    budget = EVAL_BUDGET["cpu" if device.type == "cpu" else "accelerator"]
    return int(min(4096, max(16, 2 ** math.floor(math.log2(max(1, budget // values))))))


class ContinualEvaluator:
    """Per-class correct/total counts over the tasks seen so far, on samples resident on ``device``.

    ``x_test``/``y_test``: held-out inputs and labels ``0 … n_classes-1``; ``tasks``: the class groups
    in training order. ``subsample_per_task``: keep a fixed, ``seed``-drawn subsample of that many
    samples per task. ``future_tasks``: evaluate every task at every point (not only those seen).
    ``batch_size``: ``None`` picks :func:`auto_batch_size`. ``transform``: applied to each batch.
    ``cells``: in an NI/NIC scenario, each held-out sample's cell (task k, class c; ``-1``: in no task);
    ``tasks`` and ``n_classes`` are then over cells, and a right prediction (the label) counts in the
    sample's cell — how the engine's trusted side counts.
    :meth:`evaluate` takes ``predict`` (inputs → logits) and the model (its train/eval mode is
    restored). Public: :class:`clgate.Recorder` is built on it; see docs/recorder.md.

    >>> logits = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])  # predicts 0, 1, 1, 1
    >>> y = torch.tensor([0, 1, 0, 1]); cell = torch.tensor([0, 1, 2, 3])  # 2 classes × 2 groups
    >>> ev = ContinualEvaluator(logits, y, tasks=[[0, 1], [2, 3]], n_classes=4,
    ...                         device=torch.device("cpu"), cells=cell)
    >>> ev.evaluate(lambda x: x, torch.nn.Identity(), seen_tasks=2)
    ([1, 1, 0, 1], [1, 1, 1, 1])
    """

    def __init__(
        self,
        x_test: torch.Tensor | np.ndarray | ImageFiles,
        y_test: torch.Tensor,
        *,
        tasks: list[list[int]],
        n_classes: int,
        device: torch.device,
        subsample_per_task: int | None = None,
        seed: int | str = 0,
        future_tasks: bool = False,
        batch_size: int | None = None,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        cells: torch.Tensor | None = None,
    ) -> None:
        columns = y_test if cells is None else cells  # where a sample's right prediction is counted
        selection = select_heldout(
            columns.cpu().numpy(),
            tasks=tasks,
            n_classes=n_classes,
            subsample_per_task=subsample_per_task,
            seed=seed,
        )
        self.ends = selection.ends  # number of resident samples covering tasks 0 … k
        self.totals = selection.totals  # per-class totals over tasks 0 … k
        self.selection_sha256 = selection.sha256
        selected = selection.indices
        order = torch.from_numpy(selected)
        if isinstance(x_test, ImageFiles):  # decoded once, by worker processes; kept in stored dtype
            self.x = torch.from_numpy(x_test.read(selected)).to(device)
        elif isinstance(x_test, np.ndarray):  # a memory map too: only the selected rows are read
            self.x = torch.from_numpy(np.ascontiguousarray(x_test[selected])).to(device)
        else:
            self.x = x_test[order].to(device)
        self.y = y_test[order].to(device)
        self.columns = self.y if cells is None else columns[order].to(device)
        self.n_classes = n_classes
        self.device = device
        self.future_tasks = future_tasks
        self.batch_size = batch_size or auto_batch_size(tuple(x_test.shape[1:]), device)
        self.transform = transform  # per batch, e.g. uint8 images → float (the resident copy stays small)
        self.autocast = autocast
        self._correct = torch.zeros(n_classes, dtype=torch.long, device=device)

    @property
    def n_samples(self) -> int:
        return len(self.y)

    def evaluate(
        self, predict: Callable[[torch.Tensor], torch.Tensor], model: nn.Module, *, seen_tasks: int
    ) -> tuple[list[int], list[int]]:
        """Per-class ``(correct, total)`` over the tasks ``1 … seen_tasks`` (all with future tasks)."""
        k = len(self.ends) if self.future_tasks else seen_tasks
        n = self.ends[k - 1]
        correct = self._correct
        correct.zero_()
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), self.autocast():
                for start in range(0, n, self.batch_size):
                    end = min(start + self.batch_size, n)
                    y = self.y[start:end]
                    column = self.columns[start:end]
                    x = self.x[start:end]
                    logits = predict(x if self.transform is None else self.transform(x))
                    # a NaN or +inf logit is a wrong prediction, never "class 0" (argmax of NaN);
                    # -inf is how predict_over: seen masks unseen classes
                    broken = (torch.isnan(logits) | torch.isposinf(logits)).any(dim=1)
                    hit = (logits.argmax(dim=1) == y) & ~broken
                    correct.scatter_add_(0, column, hit.long())
        finally:
            model.train(was_training)
        return correct.tolist(), list(self.totals[k - 1])

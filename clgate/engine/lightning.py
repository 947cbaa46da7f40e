"""A Lightning callback: continual evaluation of a Lightning training run with :class:`clgate.Recorder`.

One ``trainer.fit`` per task (the usual class-incremental set-up: a new dataloader per task, the same
``LightningModule``). The callback counts optimizer updates (``trainer.global_step``, so gradient
accumulation counts one update per step), lets the recorder evaluate every ``eval_every`` updates,
and closes the task when ``fit`` ends; with ``path`` it writes the log after every task (partial
until the last)::

    recorder = Recorder(x_test, y_test, tasks=tasks, eval_every=50)
    callback = RecorderCallback(recorder, path="log.json")
    for task_loader in loaders:
        Trainer(max_epochs=2, callbacks=[callback]).fit(module, task_loader)

Needs the ``lightning`` package (``pip install lightning``); ``pytorch_lightning`` works too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from clgate.engine.recorder import Recorder

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError:  # pragma: no cover - the older package name
    try:
        from pytorch_lightning import Callback, LightningModule, Trainer  # type: ignore[assignment,unused-ignore]
    except ImportError as exc:
        raise ImportError(
            "clgate.engine.lightning needs Lightning: pip install lightning (or pytorch-lightning)"
        ) from exc


def _batch_size(batch: Any) -> int | None:
    """Samples in a batch: the length of its first tensor (``(x, y)``, ``[x, y]``, ``{"x": …}`` or ``x``)."""
    if isinstance(batch, torch.Tensor):
        return len(batch)
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return len(batch[0])
    if isinstance(batch, dict):
        first = next(iter(batch.values()), None)
        if isinstance(first, torch.Tensor):
            return len(first)
    return None


class RecorderCallback(Callback):
    """Feeds a :class:`~clgate.engine.recorder.Recorder` from a Lightning ``Trainer``.

    ``task_end_on_fit_end``: each ``fit`` is one task (default); set it false to call
    ``recorder.task_end(module)`` yourself (several fits per task). ``train_bytes``: with it, a
    function ``(trainer) -> bytes of the task's training set`` records resources (the set's size is
    ``len(trainer.train_dataloader.dataset)``).
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        path: str | Path | None = None,
        task_end_on_fit_end: bool = True,
        train_bytes: Any = None,
    ) -> None:
        super().__init__()
        self.recorder = recorder
        self.path = Path(path) if path is not None else None
        self.task_end_on_fit_end = task_end_on_fit_end
        self.train_bytes = train_bytes
        self._last_step = 0
        self._pending_samples: int | None = 0

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._last_step = trainer.global_step  # a new Trainer starts at 0; a resumed one where it was
        self._pending_samples = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        n = _batch_size(batch)
        self._pending_samples = (
            None if n is None or self._pending_samples is None else self._pending_samples + n
        )
        updates = trainer.global_step - self._last_step
        if updates <= 0:
            return  # gradient accumulation: no optimizer step yet
        self._last_step = trainer.global_step
        for i in range(updates):
            samples = self._pending_samples if i == updates - 1 else 0
            self.recorder.step(pl_module, samples=samples)
        self._pending_samples = 0

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.task_end_on_fit_end:
            return
        sizes: dict[str, int] = {}
        if self.train_bytes is not None:
            dataset = getattr(trainer.train_dataloader, "dataset", None)
            if dataset is not None and hasattr(dataset, "__len__"):
                sizes = {"train_size": len(dataset), "train_bytes": int(self.train_bytes(trainer))}
        self.recorder.task_end(pl_module, **sizes)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.recorder.save(self.path)

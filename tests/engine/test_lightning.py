"""The Lightning callback end to end with the real ``lightning`` package: same log as a plain loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pl = pytest.importorskip("lightning.pytorch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402 - after importorskip

from clgate import Recorder  # noqa: E402 - after importorskip
from clgate.documents import load_log  # noqa: E402 - after importorskip
from clgate.engine.data import load_digits  # noqa: E402 - after importorskip
from clgate.engine.lightning import RecorderCallback  # noqa: E402 - after importorskip

TASKS = [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _task_sets():
    data = load_digits()
    sets = []
    for classes in TASKS:
        m = np.isin(data.y_train, classes)
        sets.append(TensorDataset(torch.from_numpy(data.x_train[m]), torch.from_numpy(data.y_train[m])))
    return data, sets


def test_callback_writes_the_same_log_as_a_plain_loop(tmp_path):
    data, sets = _task_sets()

    torch.manual_seed(0)
    module = Classifier()
    recorder = Recorder(data.x_test, data.y_test, tasks=TASKS, eval_every=7, device="cpu")
    callback = RecorderCallback(
        recorder,
        path=tmp_path / "log.json",
        train_bytes=lambda trainer: sum(t.nbytes for t in trainer.train_dataloader.dataset.tensors),
    )
    for ds in sets:
        trainer = pl.Trainer(
            max_epochs=2,
            callbacks=[callback],
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module, DataLoader(ds, batch_size=32, shuffle=False))
    lightning_log = load_log(tmp_path / "log.json")

    torch.manual_seed(0)
    model = Classifier()
    plain = Recorder(data.x_test, data.y_test, tasks=TASKS, eval_every=7, device="cpu")
    for ds in sets:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            for x, y in DataLoader(ds, batch_size=32, shuffle=False):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                plain.step(model, samples=len(y))
        plain.task_end(model, train_size=len(ds), train_bytes=sum(t.nbytes for t in ds.tensors))

    assert not lightning_log.partial
    assert [p.model_dump() for p in lightning_log.points] == [p.model_dump() for p in plain.log().points]
    assert [r.model_dump() for r in lightning_log.resources] == [
        r.model_dump() for r in plain.log().resources
    ]
    ends = [p.iteration for p in lightning_log.points if p.task_end]
    assert ends[0] == 2 * ((len(sets[0]) + 31) // 32)  # two epochs of batches of 32
    assert sum(lightning_log.points[-1].correct) > 0.3 * sum(lightning_log.points[-1].total)


def test_gradient_accumulation_counts_optimizer_steps(tmp_path):
    data, sets = _task_sets()
    torch.manual_seed(0)
    module = Classifier()
    recorder = Recorder(data.x_test, data.y_test, tasks=[*TASKS[:1], TASKS[1] + TASKS[2]], device="cpu")
    callback = RecorderCallback(recorder)
    loader = DataLoader(sets[0], batch_size=16)
    trainer = pl.Trainer(
        max_epochs=1,
        callbacks=[callback],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accumulate_grad_batches=2,
    )
    trainer.fit(module, loader)
    assert recorder.iteration == trainer.global_step == (len(loader) + 1) // 2
    assert recorder.points[-1].task_end and recorder.task == 2

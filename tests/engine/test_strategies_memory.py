"""Replay memories hold samples in their stored dtype (uint8 images: a quarter of float32) and give them
back, converted per batch, as exactly the model input they came from."""

from __future__ import annotations

import numpy as np
import torch

from clgate.engine.samples import Samples, iterate_batches, model_input
from clgate.engine.strategies import GDumb, StrategyContext, as_stored, create_strategy


def _ctx(n_features: int = 6, n_classes: int = 4) -> StrategyContext:
    return StrategyContext(
        model=torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(n_features, n_classes)),
        n_classes=n_classes,
        device=torch.device("cpu"),
        seed=0,
        batch_size=8,
    )


def _uint8_task(labels: list[int], seed: int = 0) -> Samples:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(len(labels), 1, 2, 3), dtype=np.uint8)
    return Samples(x, np.asarray(labels))


def test_every_uint8_value_survives_the_round_trip():
    k = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(as_stored(model_input(k.clone()), torch.uint8), k)
    f = torch.randn(5)
    assert as_stored(f, torch.float32) is f and as_stored(f, None) is f


def test_er_holds_uint8_and_replays_the_same_model_input():
    ctx = _ctx()
    er, _ = create_strategy("er", {"mem_size": 10}, ctx)
    task = _uint8_task([0] * 6 + [1] * 6)
    er.before_task(0, task)
    seen: dict[bytes, torch.Tensor] = {}
    for xb, yb in iterate_batches(task, torch.arange(12).split(4), ctx.device):
        er.after_step(xb, yb, first_pass=True)
        for row in xb:
            seen[as_stored(row, torch.uint8).numpy().tobytes()] = row
    x_mem, y_mem = er.memory.tensors()
    assert x_mem.dtype == torch.uint8 and len(y_mem) == 10
    assert er.buffer_bytes() == 10 * (6 * 1 + 8)  # stored bytes, not 4 per pixel
    replayed, labels = er.memory.inputs(torch.arange(10))
    for row, stored in zip(replayed, x_mem, strict=True):
        assert torch.equal(row, seen[stored.numpy().tobytes()])  # bit for bit the batch it came from
    assert torch.equal(labels, y_mem)


def test_gdumb_trains_on_its_uint8_memory_as_model_input():
    ctx = _ctx()
    g, _ = create_strategy("gdumb", {"mem_size": 6}, ctx)
    assert isinstance(g, GDumb)
    task = _uint8_task([0] * 5 + [1] * 5 + [2] * 5)
    g.before_task(0, task)
    memory = g.task_data(0, task)
    x_mem, y_mem = g.memory.tensors()
    assert x_mem.dtype == torch.uint8 and g.buffer_bytes() == 6 * (6 + 8)
    ((xb, _),) = iterate_batches(memory, [torch.arange(6)], ctx.device)
    assert xb.dtype == torch.float32 and torch.equal(xb, x_mem.float() / 255)
    # every memory row is one of the task's samples, with its label
    rows = {task.x[i].tobytes(): int(task.y[i]) for i in range(len(task))}
    assert all(rows[x.numpy().tobytes()] == int(y) for x, y in zip(x_mem, y_mem, strict=True))

"""The public recorder: a plain PyTorch loop writes the engine's log; bad calls are clear errors."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from clgate import Recorder
from clgate.documents import load_log
from clgate.engine import run_job
from clgate.engine.data import load_digits
from clgate.engine.errors import EngineInputError
from clgate.engine.models import load_model
from clgate.engine.scenario import build_tasks
from clgate.schemas.evaluation_log import EvaluationLog


def _plain_loop(*, seed: int, eval_every: int, epochs: int, batch_size: int, lr: float) -> EvaluationLog:
    """What a user's own finetune loop looks like: the engine's training, re-written by hand."""
    data = load_digits()
    tasks = build_tasks(data.n_classes, n_tasks=5)
    torch.manual_seed(seed)
    model, _ = load_model(
        arch="mlp", weights=None, torchscript=None, input_shape=data.input_shape, n_classes=10, hidden=400
    )
    recorder = Recorder(
        data.x_test,
        data.y_test,
        tasks=tasks,
        class_names=data.class_names,
        eval_every=eval_every,
        seed=seed,
        device="cpu",
    )
    x_train, y_train = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    generator = torch.Generator().manual_seed(seed)
    seen = torch.zeros(10, dtype=torch.bool)
    for classes in tasks:
        seen[classes] = True
        idx = torch.from_numpy(np.flatnonzero(np.isin(data.y_train, classes)))
        x_k, y_k = x_train[idx], y_train[idx]
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        steps = math.ceil(len(y_k) / batch_size)
        for _ in range(epochs):
            perm = torch.randperm(len(y_k), generator=generator)
            for s in range(steps):
                b = perm[s * batch_size : (s + 1) * batch_size]
                loss = F.cross_entropy(model(x_k[b]).masked_fill(~seen, float("-inf")), y_k[b])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                recorder.step(model, samples=len(b))
        recorder.task_end(model, train_size=len(y_k), train_bytes=int(x_k.nbytes + y_k.nbytes))
    return recorder.log()


@pytest.mark.parametrize("eval_every", [7, 10])  # 10 divides a task's 5 × 29 … updates: dedup path
def test_plain_loop_writes_the_engines_log(digits_spec, tmp_path, eval_every):
    spec = digits_spec(**{"evaluation.eval_every": eval_every, "training.epochs": 2})
    [path] = run_job(spec, tmp_path)
    engine = load_log(path)
    mine = _plain_loop(seed=0, eval_every=eval_every, epochs=2, batch_size=16, lr=0.05)
    assert not mine.partial and not engine.partial
    assert mine.tasks == engine.tasks and mine.class_names == engine.class_names
    assert [p.model_dump() for p in mine.points] == [p.model_dump() for p in engine.points]
    assert [r.model_dump() for r in mine.resources] == [r.model_dump() for r in engine.resources]
    assert mine.meta["iterations_per_task"] == engine.meta["iterations_per_task"]
    # the run learned something, so equality is not that of two empty logs
    assert sum(mine.points[-1].correct) > 0.15 * sum(mine.points[-1].total)


def test_save_writes_a_valid_log_and_partial_before_the_end(tmp_path):
    x = torch.randn(30, 4)
    y = torch.arange(30) % 3
    rec = Recorder(x, y, tasks=[[2], [0, 1]], eval_every=None, device="cpu", meta={"strategy": "mine"})
    model = torch.nn.Linear(4, 3)
    rec.task_end(model)  # first task already known: its task end at iteration 0
    rec.step(model)
    rec.save(tmp_path / "partial.json")
    assert load_log(tmp_path / "partial.json").partial
    rec.task_end(model)
    log = load_log(rec.save(tmp_path / "log.json"))
    assert not log.partial and log.resources is None  # no sizes given: no resources
    assert [(p.iteration, p.task, p.task_end) for p in log.points] == [(0, 1, True), (1, 2, True)]
    assert log.points[0].total == [0, 0, 10] and log.points[1].total == [10, 10, 10]
    assert log.meta["strategy"] == "mine" and log.meta["recorder"] is True
    with pytest.raises(EngineInputError, match="tasks have ended"):
        rec.step(model)


def test_seen_masking_and_all():
    x = torch.zeros(4, 1)
    y = torch.tensor([0, 1, 2, 3])

    class Prefers3(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([0.0, 1.0, 0.0, 5.0]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.w.expand(len(x), 4)

    for over, expect in (("seen", [0, 1, 0, 0]), ("all", [0, 0, 0, 0])):
        rec = Recorder(x, y, tasks=[[0, 1], [2, 3]], predict_over=over, device="cpu")
        rec.step(Prefers3())
        rec.task_end(Prefers3())
        assert rec.log().points[0].correct == expect


def test_bad_input_is_named():
    x, y = torch.zeros(4, 2), torch.tensor([0, 1, 2, 3])
    with pytest.raises(EngineInputError, match="x_test/y_test"):
        Recorder(x[:3], y, tasks=[[0, 1], [2, 3]])
    with pytest.raises(EngineInputError, match="y_test: labels"):
        Recorder(x, y + 1, tasks=[[0, 1], [2, 3]])
    with pytest.raises(EngineInputError, match="tasks: a class appears more than once"):
        Recorder(x, y, tasks=[[0, 1], [2, 2]])
    with pytest.raises(EngineInputError, match="no held-out samples"):
        Recorder(x, torch.tensor([0, 1, 2, 2]), tasks=[[0, 1], [2, 3]])
    with pytest.raises(EngineInputError, match="eval_every"):
        Recorder(x, y, tasks=[[0, 1], [2, 3]], eval_every=0)
    rec = Recorder(x, y, tasks=[[0, 1], [2, 3]], device="cpu")
    model = torch.nn.Linear(2, 4)
    rec.step(model)
    rec.task_end(model)
    with pytest.raises(EngineInputError, match="no update since task 1"):
        rec.task_end(model)
    rec2 = Recorder(x, y, tasks=[[0, 1], [2, 3]], device="cpu")
    rec2.step(model)  # no samples= …
    with pytest.raises(EngineInputError, match="samples=len"):
        rec2.task_end(model, train_size=2, train_bytes=16)
    with pytest.raises(EngineInputError, match="model output"):
        Recorder(x, y, tasks=[[0, 1], [2, 3]], device="cpu").task_end(torch.nn.Linear(2, 3))


def test_import_clgate_stays_light():
    code = "import sys, clgate; assert 'torch' not in sys.modules; print(clgate.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip()
    code = "import clgate; print(clgate.Recorder.__module__, clgate.ContinualEvaluator.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["clgate.engine.recorder", "ContinualEvaluator"]


def test_example_own_loop_writes_a_gateable_log(tmp_path):
    import runpy
    from pathlib import Path

    example = Path(__file__).parents[2] / "examples" / "own_loop.py"
    path = runpy.run_path(str(example))["main"](tmp_path)
    log = load_log(path)
    assert not log.partial and log.n_tasks == 5 and log.resources is not None
    assert log.points[0].iteration == 10 and sum(p.task_end for p in log.points) == 5


def test_uint8_inputs_stay_uint8_with_a_per_batch_transform():
    from clgate.engine.data import model_input

    x = torch.randint(0, 256, (20, 1, 2, 2), dtype=torch.uint8)
    y = torch.arange(20) % 2
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    rec = Recorder(x, y, tasks=[[0, 1]], device="cpu", transform=model_input)
    rec.step(model, samples=4)
    rec.task_end(model, train_size=4, train_bytes=16)
    assert rec.evaluator.x.dtype == torch.uint8
    with torch.no_grad():
        expected = (model(x.float() / 255).argmax(1) == y).long()
    assert rec.log().points[0].correct == [int(expected[y == c].sum()) for c in (0, 1)]
    assert rec.log().resources[0].ops_pass > 0

"""The Avalanche plugin: its hooks against the recorder, and end to end where avalanche-lib imports."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from clgate import Recorder
from clgate.documents import load_log
from clgate.engine.avalanche import RecorderPlugin
from clgate.engine.data import load_digits

TASKS = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))


def test_hooks_in_avalanches_order_write_the_plain_loops_log(tmp_path):
    """Avalanche calls after_update after each optimizer step and after_training_exp per experience."""
    data = load_digits()
    logs = []
    for use_plugin in (True, False):
        torch.manual_seed(0)
        model = _net()
        recorder = Recorder(data.x_test, data.y_test, tasks=TASKS, eval_every=5, device="cpu")
        plugin = RecorderPlugin(recorder, path=tmp_path / "log.json", train_bytes=lambda e: e.dataset.nbytes)
        for classes in TASKS:
            m = np.isin(data.y_train, classes)
            x, y = torch.from_numpy(data.x_train[m]), torch.from_numpy(data.y_train[m])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for b in torch.arange(len(y)).split(64):
                optimizer.zero_grad()
                F.cross_entropy(model(x[b]), y[b]).backward()
                optimizer.step()
                if use_plugin:
                    plugin.after_update(SimpleNamespace(model=model, mb_x=x[b], mb_y=y[b]))
                else:
                    recorder.step(model, samples=len(b))
            if use_plugin:
                experience = SimpleNamespace(dataset=_Sized(len(y), x.nbytes + y.nbytes))
                plugin.after_training_exp(SimpleNamespace(model=model, experience=experience))
            else:
                recorder.task_end(model, train_size=len(y), train_bytes=x.nbytes + y.nbytes)
        logs.append(load_log(tmp_path / "log.json") if use_plugin else recorder.log())
    assert logs[0].model_dump(exclude={"meta"}) == logs[1].model_dump(exclude={"meta"})
    assert logs[0].resources is not None and not logs[0].partial


class _Sized:
    def __init__(self, n: int, nbytes: int) -> None:
        self.n, self.nbytes = n, nbytes

    def __len__(self) -> int:
        return self.n


def test_with_real_avalanche(tmp_path, request):
    import importlib.util

    if importlib.util.find_spec("avalanche") is None:
        pytest.skip(
            "avalanche-lib is not installed (see docs/recorder.md: it needs an environment of its own)"
        )
    request.getfixturevalue("torchvision_models")  # avalanche imports torchvision: load it first
    from avalanche.benchmarks import tensors_benchmark
    from avalanche.core import SupervisedPlugin
    from avalanche.training.supervised import Naive

    import clgate.engine.avalanche

    # the plugin picks its base class when first imported: again, now that avalanche imports
    plugin_cls = importlib.reload(clgate.engine.avalanche).RecorderPlugin
    assert isinstance(
        plugin_cls(Recorder(torch.zeros(2, 1), torch.tensor([0, 1]), tasks=[[0, 1]])), SupervisedPlugin
    )
    data = load_digits()
    streams = []
    for classes in TASKS:
        m = np.isin(data.y_train, classes)
        streams.append((torch.from_numpy(data.x_train[m]), torch.from_numpy(data.y_train[m])))
    bm = tensors_benchmark(
        train_tensors=streams,
        test_tensors=streams,
        task_labels=[0] * len(TASKS),
        complete_test_set_only=False,
    )
    torch.manual_seed(0)
    model = _net()
    recorder = Recorder(data.x_test, data.y_test, tasks=TASKS, eval_every=5, device="cpu")
    strategy = Naive(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        train_mb_size=64,
        train_epochs=1,
        device="cpu",
        plugins=[plugin_cls(recorder, path=tmp_path / "log.json")],
        evaluator=None,
    )
    for experience in bm.train_stream:
        strategy.train(experience)
    log = load_log(tmp_path / "log.json")
    assert not log.partial and [p.task for p in log.points if p.task_end] == [1, 2]
    assert log.meta["iterations_per_task"] == [(len(y) + 63) // 64 for _, y in streams]

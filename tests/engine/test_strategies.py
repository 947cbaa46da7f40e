"""Strategy registry, plugins by entry point, hyper-parameter validation, memories."""

from __future__ import annotations

import textwrap
import typing
from collections import Counter

import pytest
import torch

from clgate.documents import load_log
from clgate.engine import run_job
from clgate.engine.errors import StrategyError
from clgate.engine.samples import Samples
from clgate.engine.strategies import (
    BUILTIN_STRATEGIES,
    ER,
    GDumb,
    Strategy,
    StrategyContext,
    available_strategies,
    create_strategy,
    get_strategy,
)


def _ctx(n_classes: int = 4) -> StrategyContext:
    return StrategyContext(
        model=torch.nn.Linear(3, n_classes),
        n_classes=n_classes,
        device=torch.device("cpu"),
        seed=0,
        batch_size=8,
    )


def test_every_builtin_names_its_paper():
    papers = {
        "finetune": "McCloskey",
        "joint": "De Lange",
        "er": "Chaudhry",
        "gdumb": "Prabhu",
        "lwf": "Li & Hoiem",
        "ewc": "Kirkpatrick",
        "wa": "Zhao",
        "icarl": "Rebuffi",
        "derpp": "Buzzega",
    }
    assert set(BUILTIN_STRATEGIES) == set(papers)
    for name, author in papers.items():
        assert author in (BUILTIN_STRATEGIES[name].__doc__ or ""), name


def test_unknown_strategy_and_parameters():
    with pytest.raises(StrategyError, match=r"unknown strategy 'rehearsal' \(available: .*er.*\)"):
        get_strategy("rehearsal")
    with pytest.raises(StrategyError, match=r"strategy.params.mem_szie: er takes no parameter 'mem_szie'"):
        create_strategy("er", {"mem_szie": 10}, _ctx())
    with pytest.raises(
        StrategyError, match=r"strategy.params.mem_size: Input should be greater than or equal to 1"
    ):
        create_strategy("er", {"mem_size": 0}, _ctx())
    # a parameter of another strategy is ignored (one spec can switch strategy.name), and reported
    strategy, ignored = create_strategy("finetune", {"mem_size": 100}, _ctx())
    assert strategy.name == "finetune" and ignored == ["mem_size"]


def test_er_reservoir_memory_is_class_balanced():
    torch.manual_seed(0)  # the inputs below are drawn: their rows must stay near their label
    ctx = _ctx(n_classes=4)
    er, _ = create_strategy("er", {"mem_size": 40}, ctx)
    assert isinstance(er, ER)
    # an imbalanced stream: 200 samples of class 0, then 30 of class 1, then 100 of class 2
    for label, n in ((0, 200), (1, 30), (2, 100)):
        y = torch.full((n,), label)
        x = torch.randn(n, 3) + label
        for start in range(0, n, 8):
            er.after_step(x[start : start + 8], y[start : start + 8], first_pass=True)
    x_mem, y_mem = er.memory.tensors()
    counts = Counter(y_mem.tolist())
    assert len(y_mem) == 40 and sum(counts.values()) == 40
    assert counts[1] == 13 or counts[1] == 14  # the small class keeps what balance allows
    assert abs(counts[0] - counts[2]) <= 1
    # memory rows agree with their labels (inputs were shifted by their label)
    assert torch.allclose(x_mem.mean(dim=1).round(), y_mem.float(), atol=1.5)
    assert er.buffer_bytes() == 40 * (3 * 4 + 8)
    # later epochs do not re-enter the stream
    before = y_mem.clone()
    er.after_step(torch.randn(8, 3), torch.full((8,), 3), first_pass=False)
    assert torch.equal(er.memory.tensors()[1], before)


def test_gdumb_memory_is_balanced_and_model_reset():
    ctx = _ctx(n_classes=4)
    g, _ = create_strategy("gdumb", {"mem_size": 12}, ctx)
    assert isinstance(g, GDumb)
    initial = {k: v.clone() for k, v in ctx.model.state_dict().items()}
    for k, labels in enumerate(([0] * 20 + [1] * 20, [2] * 20 + [3] * 20)):
        with torch.no_grad():
            ctx.model.weight.add_(1.0)  # "training" moves the weights
        y = torch.tensor(labels)
        data = Samples(y[:, None].float() + torch.rand(len(y), 3) / 2, y)
        g.before_task(k, data)
        assert all(torch.equal(initial[n], t) for n, t in ctx.model.state_dict().items())
        memory = g.task_data(k, data)
        assert len(memory) == 12
    y_t = memory.labels
    assert sorted(Counter(y_t.tolist()).values()) == [3, 3, 3, 3]
    # the rows read into the memory are the samples of their labels (inputs are label + [0, 0.5))
    x_t, _ = memory.take(range(12))
    assert torch.equal(x_t.floor(), y_t.float()[:, None].expand(12, 3))


@pytest.mark.parametrize(
    ("name", "head"),
    [
        ("gdumb", "fixed"),
        ("lwf", "fixed"),
        ("ewc", "fixed"),
        ("joint", "fixed"),
        ("wa", "growing"),
        ("icarl", "growing"),
        ("derpp", "growing"),
    ],
)
def test_other_strategies_run_and_learn(tmp_path, synthetic_spec, name, head):
    spec = synthetic_spec(**{"strategy.name": name, "training.epochs": 2, "model.head": head})
    (path,) = run_job(spec, tmp_path)
    log = load_log(path)
    end = log.points[-1]
    assert log.meta["strategy"] == name and end.task_end
    assert sum(end.correct) / sum(end.total) > 1 / 6  # better than chance over 6 classes
    if name in ("gdumb", "joint", "wa", "icarl", "derpp"):
        assert log.resources[-1].buffer_bytes > 0
    if name == "joint":  # cumulative data: the last task trains on all 180 samples
        assert log.meta["iterations_per_task"] == [16, 30, 46]


PLUGIN = textwrap.dedent(
    '''
    import torch.nn.functional as F
    from pydantic import BaseModel, ConfigDict
    from clgate.engine.strategies import Strategy

    class Params(BaseModel):
        model_config = ConfigDict(extra="forbid")
        smoothing: float = 0.0

    class LabelSmoothing(Strategy):
        """Fine-tuning with label smoothing (a third-party strategy for the test)."""
        name = "smooth"
        Params = Params

        def loss(self, x, y):
            return F.cross_entropy(self.ctx.logits(x), y, label_smoothing=self.params.smoothing)
    '''
)


def test_third_party_strategy_through_entry_point(tmp_path, monkeypatch, synthetic_spec):
    (tmp_path / "clgate_test_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "clgate_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: clgate-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[clgate.strategies]\nsmooth = clgate_test_plugin:LabelSmoothing\n"
    )
    assert "smooth" not in available_strategies()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "smooth" in available_strategies()
    # predict_over: all — label smoothing over logits masked to -inf (predict_over: seen) is an infinite
    # loss, which the runner now stops as a diverged run (issue 9)
    spec = synthetic_spec(
        **{"strategy.name": "smooth", "strategy.smoothing": 0.1, "model.predict_over": "all"}
    )
    (path,) = run_job(spec, tmp_path / "out")
    log = load_log(path)
    assert log.meta["strategy"] == "smooth" and log.meta["strategy_params"] == {"smoothing": 0.1}


def test_broken_plugin_is_reported(tmp_path, monkeypatch):
    dist = tmp_path / "broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[clgate.strategies]\nbroken = no_such_module_xyz:Thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        StrategyError, match=r"strategy plugin 'broken' \(no_such_module_xyz:Thing\) cannot be loaded"
    ):
        get_strategy("broken")


@pytest.mark.parametrize("name", sorted(BUILTIN_STRATEGIES))
def test_each_builtin_types_its_params_with_its_own_model(name):
    """``class ER(Strategy[ERParams])`` with ``Params = ERParams``: self.params is typed as what it is."""
    cls = BUILTIN_STRATEGIES[name]
    (base,) = (b for b in cls.__orig_bases__ if typing.get_origin(b) is Strategy)
    assert typing.get_args(base) == (cls.Params,)
    assert type(cls(_ctx(n_classes=2)).params) is cls.Params

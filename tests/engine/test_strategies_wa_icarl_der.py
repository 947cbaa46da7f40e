"""WA's weight aligning, iCaRL's herding and nearest-mean classifier, DER++'s logit replay: each rule
checked on a small hand-made case, against an independent computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from clgate.documents import load_job, load_log
from clgate.engine import run_job
from clgate.engine.errors import StrategyError
from clgate.engine.models import build_model, grow_head, make_growing_head
from clgate.engine.samples import Samples
from clgate.engine.strategies import (
    WA,
    DERpp,
    ICaRL,
    StrategyContext,
    class_rows,
    create_strategy,
    find_head,
    head_norms,
    herding,
)


def _ctx(model: nn.Module, n_classes: int = 4, batch_size: int = 8) -> StrategyContext:
    torch.manual_seed(0)
    return StrategyContext(
        model=model, n_classes=n_classes, device=torch.device("cpu"), seed=0, batch_size=batch_size
    )


def _mlp(n_classes: int = 4, *, growing: bool = False) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, n_classes))
    return make_growing_head(model, n_classes) if growing else model


# ---------------------------------------------------------------------- WA
@pytest.mark.parametrize("growing", [False, True], ids=["linear-head", "growing-head"])
def test_wa_aligns_the_new_classes_mean_norm_to_the_old(growing):
    model = _mlp(growing=growing)
    ctx = _ctx(model)
    wa, _ = create_strategy("wa", {"mem_size": 10}, ctx)
    assert isinstance(wa, WA)
    for k, classes in enumerate(([0, 1], [2, 3])):
        grow_head(model, classes)
        ctx.seen[classes] = True
        data = Samples(np.zeros((4, 3), np.float32), np.array(classes * 2))
        if k == 1:  # the new classes' vectors are larger, as after training on their data
            rows = class_rows(wa.head)
            with torch.no_grad():
                for c in classes:
                    rows[c][0].weight[rows[c][1]] *= 3.0 + c
            before = {c: rows[c][0].weight[rows[c][1]].clone() for c in classes}
            biases = {c: rows[c][0].bias[rows[c][1]].clone() for c in classes}
        wa.end_training(k, data)
        wa.after_task(k, data)
    old, new = head_norms(wa.head, [0, 1]), head_norms(wa.head, [2, 3])
    assert abs(float(old.mean() - new.mean())) < 1e-6
    gamma = wa.gammas[1]
    assert wa.gammas[0] == 1.0 and gamma < 1  # nothing to align after the first task
    for c in (2, 3):  # only rescaled: same direction, gamma times the length
        assert torch.allclose(rows[c][0].weight[rows[c][1]], gamma * before[c], atol=1e-6)
    assert torch.equal(rows[2][0].bias[rows[2][1]], biases[2])  # weights only (PyCIL aligns fc.weight)


@pytest.mark.parametrize("params", [{}, {"clip": True}], ids=["default", "clip"])
def test_wa_clips_the_head_to_non_negative_weights(params):
    model = _mlp()
    ctx = _ctx(model)
    ctx.seen[[0, 1]] = True
    wa, _ = create_strategy("wa", {"mem_size": 10, "bias": "keep", **params}, ctx)
    assert bool((model[2].weight < 0).any())
    bias = model[2].bias.detach().clone()
    positive = model[2].weight.detach().clamp(min=0)
    wa.after_step(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]), first_pass=True)
    assert torch.equal(model[2].weight, positive)  # negatives to 0, the rest untouched
    assert torch.equal(model[2].bias, bias) and bool((model[0].weight < 0).any())  # head weights only


@pytest.mark.parametrize("growing", [False, True], ids=["linear-head", "growing-head"])
def test_wa_holds_the_head_bias_at_zero_by_default(growing):
    """The paper's classifier has no bias: 0 from the first trained task, the new rows of a growing head
    included; the layers below keep theirs; ``bias: keep`` leaves it to training."""
    model = _mlp(growing=growing)
    ctx = _ctx(model)
    wa, _ = create_strategy("wa", {"mem_size": 10}, ctx)
    assert wa.params.bias == "zero"
    below = model[0].bias.detach().clone()
    for k, classes in enumerate(([0, 1], [2, 3])):
        grow_head(model, classes)
        ctx.seen[classes] = True
        rows = class_rows(wa.head)
        with torch.no_grad():
            for c in classes:
                rows[c][0].bias[rows[c][1]] = 0.5 + c  # as a fresh row, or an update, might leave it
        data = Samples(np.zeros((4, 3), np.float32), np.array(classes * 2))
        wa.before_task(k, data)
        assert all(float(rows[c][0].bias.detach()[rows[c][1]]) == 0.0 for c in classes)
        with torch.no_grad():
            rows[classes[0]][0].bias[rows[classes[0]][1]] = 1.0
        wa.after_step(torch.randn(4, 3), torch.tensor(classes * 2), first_pass=True)
        assert all(float(rows[c][0].bias.detach()[rows[c][1]]) == 0.0 for c in range(classes[1] + 1))
    assert torch.equal(model[0].bias, below)
    kept, _ = create_strategy("wa", {"mem_size": 10, "bias": "keep"}, _ctx(_mlp()))
    with torch.no_grad():
        kept.head.bias.fill_(0.25)
    kept.before_task(0, Samples(np.zeros((2, 3), np.float32), np.array([0, 1])))
    kept.after_step(torch.randn(2, 3), torch.tensor([0, 1]), first_pass=True)
    assert bool((kept.head.bias == 0.25).all())


def test_wa_without_clipping_leaves_the_head_alone():
    model = _mlp()
    ctx = _ctx(model)
    wa, _ = create_strategy("wa", {"mem_size": 10, "clip": False}, ctx)
    weight = model[2].weight.detach().clone()
    wa.after_step(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]), first_pass=True)
    assert torch.equal(model[2].weight, weight) and bool((weight < 0).any())


def test_wa_loss_weighs_distillation_by_the_old_classes_share():
    """(1 − λ)·CE + λ·KD with λ = C_old / C_total on the whole batch (new samples and exemplars alike);
    KD on the old classes' logits at T = 2, checked against PyCIL's soft-target cross-entropy less the
    teacher's entropy (a constant)."""
    model = _mlp(6)
    ctx = _ctx(model, n_classes=6, batch_size=4)
    wa, _ = create_strategy("wa", {"mem_size": 12}, ctx)
    assert isinstance(wa, WA) and wa.params.kd_temperature == 2.0
    torch.manual_seed(1)
    ctx.seen[[0, 1]] = True
    first = Samples(torch.randn(8, 3), torch.tensor([0, 1] * 4))
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 0, 1])
    assert wa.kd_weight() == 0.0
    assert torch.equal(wa.loss(x, y), F.cross_entropy(ctx.logits(x), y))  # first task: CE alone
    wa.end_training(0, first)
    wa.after_task(0, first)
    with torch.no_grad():  # the model moves away from its teacher
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    xb, yb = torch.cat([x, torch.randn(2, 3)]), torch.cat([y + 2, torch.tensor([0, 1])])  # new + exemplars
    for seen, lam in (([2, 3], 2 / 4), ([4, 5], 2 / 6)):  # 2 old classes; 2 or 4 new ones
        ctx.seen[seen] = True
        assert wa.kd_weight() == pytest.approx(lam)
        extra = wa.extra_train_samples
        got = wa.loss(xb, yb)
        assert wa.extra_train_samples == extra  # no replay batch beside the batch
        ce = F.cross_entropy(ctx.logits(xb), yb)
        soft = torch.softmax(wa.teacher(xb)[:, :2] / 2, dim=1)
        soft_ce = -(soft * torch.log_softmax(model(xb)[:, :2] / 2, dim=1)).sum() / len(xb)
        entropy = -(soft * soft.log()).sum() / len(xb)
        assert torch.allclose(got, (1 - lam) * ce + lam * (soft_ce - entropy), atol=1e-6)


@pytest.mark.parametrize("stored", [np.uint8, np.float32], ids=["uint8", "float32"])
def test_wa_task_data_is_the_new_samples_and_exactly_the_exemplars(stored):
    """The paper's one training set per task: the task's samples, then every exemplar, in stored dtype."""
    model = _mlp(6)
    ctx = _ctx(model, n_classes=6)
    wa, _ = create_strategy("wa", {"mem_size": 6}, ctx)
    rng = np.random.default_rng(0)
    source = (rng.random((30, 3)) * 255).astype(stored)
    labels = np.repeat(np.arange(6), 5)
    first, second = Samples(source, labels, np.arange(10)), Samples(source, labels, np.arange(10, 20))
    ctx.seen[[0, 1]] = True
    assert wa.task_data(0, first) is first  # no exemplar yet: the task alone
    assert wa.expected_train_size(0, [10, 10, 10]) == 10
    wa.end_training(0, first)
    wa.after_task(0, first)
    ctx.seen[[2, 3]] = True
    train = wa.task_data(1, second)
    assert wa.expected_train_size(1, [10, 10, 10]) == len(train) == 10 + 6
    x, y = train.take(np.arange(len(train)))
    assert x.dtype == torch.from_numpy(source[:1]).dtype  # stored dtype, not model input
    assert torch.equal(x[:10], torch.from_numpy(source[10:20])) and y[:10].tolist() == labels[10:20].tolist()
    ex = torch.cat([wa.exemplars[c] for c in (0, 1)])
    assert torch.equal(x[10:], ex) and y[10:].tolist() == [0] * 3 + [1] * 3
    rows = [int(np.flatnonzero((source == r.numpy()).all(axis=1))[0]) for r in x[10:]]
    assert len(set(rows)) == 6 and set(rows) <= set(range(10))  # exactly 3 distinct exemplars per old class


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.script: the refused kind
def test_a_model_without_a_head_is_refused_by_name():
    ctx = _ctx(nn.Sequential(nn.Flatten()))
    for name in ("wa", "icarl"):
        with pytest.raises(StrategyError, match=rf"strategy.name: {name} needs the model's head"):
            create_strategy(name, {}, ctx)
    with pytest.raises(StrategyError, match=r"strategy\.name: icarl needs the model's head"):
        find_head(torch.jit.script(nn.Sequential(nn.Linear(3, 4))), 4, strategy="icarl")


# ---------------------------------------------------------------------- iCaRL
def _herding_by_brute_force(features: np.ndarray, m: int) -> list[int]:
    """Rebuffi et al.'s rule spelled out: at step k, try every unchosen sample, keep the one whose
    addition puts the mean of the chosen closest to the class mean (features L2-normalised)."""
    f = features / np.linalg.norm(features, axis=1, keepdims=True)
    mu = f.mean(axis=0)
    chosen: list[int] = []
    for _ in range(m):
        best, best_distance = -1, np.inf
        for i in range(len(f)):
            if i in chosen:
                continue
            distance = np.linalg.norm(mu - f[[*chosen, i]].mean(axis=0))
            if distance < best_distance:
                best, best_distance = i, distance
        chosen.append(best)
    return chosen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_herding_matches_the_brute_force_rule(seed):
    features = np.random.default_rng(seed).normal(size=(9, 4)).astype(np.float64)
    expected = _herding_by_brute_force(features, 6)
    assert herding(torch.from_numpy(features), 6) == expected
    assert herding(torch.from_numpy(features), 20) == _herding_by_brute_force(features, 9)  # all, once


def test_nme_predicts_the_nearest_class_mean_of_hand_made_features():
    head = nn.Linear(2, 3)  # the model is its head: its features are its input
    ctx = _ctx(head, n_classes=3)
    icarl, _ = create_strategy("icarl", {"mem_size": 6}, ctx)
    assert isinstance(icarl, ICaRL)
    icarl.exemplars = {  # normalised means: class 0 → (1, 0), class 1 → (0, 1); class 2 has none
        0: torch.tensor([[2.0, 0.0], [5.0, 0.0]]),
        1: torch.tensor([[0.0, 1.0], [0.0, 3.0]]),
    }
    x = torch.tensor([[3.0, 1.0], [1.0, 4.0], [-1.0, 0.2], [0.5, 0.6]])
    scores = icarl.predict(x)
    assert scores.argmax(1).tolist() == [0, 1, 1, 1]
    assert bool(torch.isinf(scores[:, 2]).all())
    u = F.normalize(x, dim=1)
    to_mean = [(u - torch.tensor(mean)).norm(dim=1) for mean in ([1.0, 0.0], [0.0, 1.0])]
    expected = -torch.stack(to_mean, dim=1)
    assert torch.allclose(scores[:, :2], expected, atol=1e-6)


def test_icarl_splits_its_memory_among_seen_classes_by_herding_priority():
    model = _mlp()
    ctx = _ctx(model)
    icarl, _ = create_strategy("icarl", {"mem_size": 8}, ctx)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(40, 3), dtype=np.uint8)
    y = np.repeat([0, 1, 2, 3], 10)
    source = Samples(x, y)
    first = source.where_label([0, 1])
    icarl.before_task(0, first)
    assert sorted(icarl.provisional) == [0, 1] and all(len(v) == 4 for v in icarl.provisional.values())
    icarl.end_training(0, first)
    kept = {c: v.clone() for c, v in icarl.exemplars.items()}
    assert {c: len(v) for c, v in kept.items()} == {0: 4, 1: 4} and icarl.provisional == {}
    assert icarl.exemplars[0].dtype == torch.uint8 and icarl.buffer_bytes() == 8 * (3 + 8)
    second = source.where_label([2, 3])
    icarl.before_task(1, second)
    icarl.end_training(1, second)
    assert {c: len(v) for c, v in icarl.exemplars.items()} == {0: 2, 1: 2, 2: 2, 3: 2}
    for c in (0, 1):  # the old sets keep their first (highest-priority) exemplars
        assert torch.equal(icarl.exemplars[c], kept[c][:2])
    for c, rows in icarl.exemplars.items():  # exemplars are samples of their class
        own = {bytes(r) for r in x[y == c]}
        assert all(bytes(r.numpy()) in own for r in rows)


@pytest.mark.parametrize("name", ["icarl", "wa"])
def test_a_known_class_in_a_later_task_gets_a_set_of_its_new_samples(name):
    """NI/NIC: a class's exemplars are split among the tasks that brought it, each set herded from that
    task's samples, the earlier sets cut to their first ones; NC is iCaRL's one set per class."""
    model = _mlp()
    ctx = _ctx(model)
    strategy, _ = create_strategy(name, {"mem_size": 8}, ctx)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(60, 3), dtype=np.uint8)
    y = np.tile(np.repeat([0, 1], 10), 3)  # three groups (tasks) of 20 samples, classes 0 and 1
    y[50:] = 2  # the third group brings class 0 again and a new class 2 (NIC)
    groups = [Samples(x, y, np.arange(20 * g, 20 * (g + 1))) for g in range(3)]

    def herded(task: Samples, c: int, m: int) -> torch.Tensor:
        where = (task.labels == c).nonzero().flatten()
        with torch.no_grad():
            feats = model[1](model[0](torch.from_numpy(x[task.index[where.numpy()]]).float() / 255))
        return torch.from_numpy(x[task.index[where[herding(feats, m)].numpy()]])

    sets: dict[int, list[torch.Tensor]] = {}
    for k, (task, quota) in enumerate(
        zip(groups, ({0: [4], 1: [4]}, {0: [2, 2], 1: [2, 2]}, None), strict=True)
    ):
        ctx.seen[task.labels.unique()] = True
        strategy.before_task(k, task)
        strategy.end_training(k, task)
        strategy.after_task(k, task)
        if quota is not None:
            for c in (0, 1):
                sets.setdefault(c, []).append(herded(task, c, quota[c][-1]))
                assert [len(v) for v in strategy.cells[c]] == quota[c]
                assert torch.equal(
                    strategy.exemplars[c], torch.cat([v[:n] for v, n in zip(sets[c], quota[c], strict=True)])
                )
    # task 3: 8 // 3 classes = 2 a class; class 0 over its three sets (1, 1, 0), class 1 over two (1, 1)
    assert {c: [len(v) for v in sets_] for c, sets_ in strategy.cells.items()} == {
        0: [1, 1, 0],
        1: [1, 1],
        2: [2],
    }
    assert torch.equal(strategy.exemplars[0], torch.cat([sets[0][0][:1], sets[0][1][:1]]))
    assert torch.equal(strategy.exemplars[2], herded(groups[2], 2, 2))
    assert strategy.buffer_bytes() == 6 * (3 + 8)


def test_icarl_needs_one_exemplar_per_class():
    with pytest.raises(StrategyError, match=r"strategy.params.mem_size: icarl keeps at least one exemplar"):
        create_strategy("icarl", {"mem_size": 3}, _ctx(_mlp()))


# ---------------------------------------------------------------------- DER++
def test_derpp_replays_the_logits_recorded_at_insertion():
    model = _mlp()
    ctx = _ctx(model, batch_size=3)
    der, _ = create_strategy("derpp", {"mem_size": 1, "alpha": 0.7, "beta": 0.0}, ctx)
    assert isinstance(der, DERpp)
    ctx.seen[[0, 1]] = True
    x, y = torch.randn(1, 3), torch.tensor([1])
    der.loss(x, y)
    recorded = model(x).detach()
    der.after_step(x, y, first_pass=True)
    assert torch.equal(der.targets[0, :2], recorded[0, :2]) and not bool(der.targets[0, 2:].any())
    assert der.width[0].tolist() == [True, True, False, False]
    with torch.no_grad():  # training moves on, and the next task's classes arrive
        model[2].weight.add_(0.5)
    ctx.seen[[2, 3]] = True
    xb, yb = torch.randn(3, 3), torch.tensor([2, 3, 2])
    got = der.loss(xb, yb)
    now = model(x)[0, :2]  # the one memory sample, drawn three times; compared on its stored width
    expected = F.cross_entropy(ctx.logits(xb), yb) + 0.7 * ((now - recorded[0, :2]) ** 2).sum() / 2
    assert torch.allclose(got, expected, atol=1e-6)
    assert der.extra_train_samples == 3


def test_derpp_without_its_terms_is_finetune():
    model = _mlp()
    ctx = _ctx(model)
    ctx.seen[[0, 1]] = True
    der, _ = create_strategy("derpp", {"mem_size": 4, "alpha": 0.0, "beta": 0.0}, ctx)
    x, y = torch.randn(8, 3), torch.tensor([0, 1] * 4)
    der.loss(x, y)
    der.after_step(x, y, first_pass=True)
    assert der.memory.filled == 4
    x2 = torch.randn(8, 3)
    finetune, _ = create_strategy("finetune", {}, ctx)
    assert torch.equal(der.loss(x2, y), finetune.loss(x2, y)) and der.extra_train_samples == 0


def test_derpp_reservoir_keeps_a_uniform_sample_of_the_stream():
    ctx = _ctx(nn.Linear(3, 4))
    der, _ = create_strategy("derpp", {"mem_size": 50}, ctx)
    ctx.seen[:] = True
    for label in range(4):  # 4 × 250 samples; each class should keep about a quarter of the slots
        for _ in range(25):
            xb = torch.randn(10, 3)
            der.observe(xb, torch.full((10,), label), ctx.model(xb).detach())
    counts = np.bincount(der.memory.tensors()[1].numpy(), minlength=4)
    assert counts.sum() == 50 and counts.min() >= 5  # uniform would be 12.5 each
    assert der.buffer_bytes() == 50 * (3 * 4 + 8) + 50 * 4 * (4 + 1)


@pytest.mark.parametrize("name", ["wa", "icarl", "derpp"])
def test_the_shipped_example_job_validates(name):
    spec = load_job(Path(__file__).resolve().parents[2] / "examples" / "jobs" / f"digits-{name}.yaml")
    ctx = _ctx(_mlp(10), n_classes=10)
    strategy, ignored = create_strategy(spec.strategy.name, spec.strategy.params, ctx)
    assert strategy.name == name and ignored == []


@pytest.mark.parametrize(
    ("name", "held", "iterations"),
    [
        ("wa", 12 * (8 * 4 + 8), [0, 9, 9]),  # its tasks' updates also iterate over the 12 exemplars
        ("icarl", 2 * 6 * (8 * 4 + 8), [0, 8, 8]),  # herding: 12 // 2 classes seen = 6 exemplars for each
        ("derpp", 12 * (8 * 4 + 8) + 12 * 6 * (4 + 1), [0, 8, 8]),  # and each sample's logits and class mask
    ],
)
def test_a_learned_first_task_enters_the_memory(tmp_path, synthetic_spec, name, held, iterations):
    from safetensors.torch import save_file

    weights = tmp_path / "candidate.safetensors"
    save_file(build_model("mlp", (8,), 6, hidden=32).state_dict(), str(weights))
    spec = synthetic_spec(
        **{
            "scenario.first_task_learned": True,
            "strategy.name": name,
            "strategy.mem_size": 12,
            "model.weights": str(weights),
        }
    )
    (path,) = run_job(spec, tmp_path)
    log = load_log(path)
    assert log.points[0].iteration == 0 and log.points[0].task_end
    assert log.meta["iterations_per_task"] == iterations
    assert log.resources[0].buffer_bytes == held


def test_icarl_nearest_mean_points_change_nothing_in_training(tmp_path, synthetic_spec):
    """iCaRL's predictions compute class means with the model at every point: that must draw nothing
    random and move no weight, so the task-end points are those of a run evaluated only at task ends."""
    base = synthetic_spec(**{"strategy.name": "icarl", "strategy.mem_size": 12, "training.epochs": 2})
    (on,) = run_job(base.with_overrides({"evaluation.eval_every": 1}), tmp_path / "on")
    (off,) = run_job(base.with_overrides({"evaluation.eval_every": None}), tmp_path / "off")
    ends_on = [(p.correct, p.total) for p in load_log(on).points if p.task_end]
    ends_off = [(p.correct, p.total) for p in load_log(off).points if p.task_end]
    assert len(load_log(on).points) > len(ends_on) == 3 and ends_on == ends_off

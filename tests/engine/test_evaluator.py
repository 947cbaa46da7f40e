"""The continual evaluator: counts equal a naive loop; training state is left exactly as found."""

from __future__ import annotations

import pytest
import torch

from clgate.engine.evaluator import ContinualEvaluator
from clgate.engine.models import build_model


@pytest.mark.parametrize("future", [False, True], ids=["seen-tasks", "future-tasks"])
def test_counts_match_naive_loop_and_state_is_untouched(future):
    torch.manual_seed(0)
    x = torch.randn(50, 1, 8, 8)
    y = torch.arange(50) % 5
    tasks = [[3, 1], [0], [4, 2]]
    model = build_model("resnet18-slim", (1, 8, 8), 5).train()
    model(torch.randn(8, 1, 8, 8))  # move BatchNorm statistics away from their defaults
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    ev = ContinualEvaluator(
        x, y, tasks=tasks, n_classes=5, device=torch.device("cpu"), batch_size=7, future_tasks=future
    )
    seen = torch.zeros(5, dtype=torch.bool)
    seen[[3, 1, 0]] = True

    def predict(inp):
        return model(inp).masked_fill(~seen, float("-inf"))

    correct, total = ev.evaluate(predict, model, seen_tasks=2)
    assert model.training  # train mode restored
    assert torch.equal(torch.get_rng_state(), rng)  # no random numbers drawn
    assert all(torch.equal(buffers[k], v) for k, v in model.state_dict().items())  # BN stats untouched
    evaluated = {3, 1, 0, 4, 2} if future else {3, 1, 0}
    model.eval()
    exp_correct, exp_total = [0] * 5, [0] * 5
    with torch.no_grad():
        for xi, yi in zip(x, y.tolist(), strict=True):
            if yi in evaluated:
                exp_total[yi] += 1
                exp_correct[yi] += int(predict(xi[None]).argmax(1).item() == yi)
    assert (correct, total) == (exp_correct, exp_total)
    model.eval()
    ev.evaluate(predict, model, seen_tasks=1)
    assert not model.training  # eval mode stays eval


def test_fixed_seeded_subsample():
    x = torch.randn(100, 3)
    y = torch.arange(100) % 4
    kw = dict(tasks=[[0, 1], [2, 3]], n_classes=4, device=torch.device("cpu"), subsample_per_task=10)
    a = ContinualEvaluator(x, y, seed=0, **kw)
    b = ContinualEvaluator(x, y, seed=0, **kw)
    c = ContinualEvaluator(x, y, seed=1, **kw)
    assert a.n_samples == 20 and torch.equal(a.x, b.x) and not torch.equal(a.x, c.x)
    model = torch.nn.Linear(3, 4)
    _, total = a.evaluate(model, model, seen_tasks=2)
    assert sum(total) == 20

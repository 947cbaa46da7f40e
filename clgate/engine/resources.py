"""Resource accounting for the Díaz-Rodríguez efficiency criteria (ms, sss, ce).

Mul-adds are counted with ``torch.utils.flop_counter.FlopCounterMode`` on one forward+backward of a
small batch and scaled linearly by the number of samples. ``FlopCounterMode`` reports FLOPs with one
multiply-add = 2 FLOPs, so mul-adds = FLOPs / 2.

>>> import torch
>>> m = torch.nn.Linear(4, 3)
>>> cost = measure_costs(m, torch.zeros(2, 4))
>>> cost.forward_muladds, cost.train_muladds   # 4·3 mul-adds forward; + weight grads backward
(12.0, 24.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


@dataclass(frozen=True)
class SampleCost:
    """Mul-adds per sample: a forward pass, and a forward + backward (training) pass."""

    forward_muladds: float
    train_muladds: float


def measure_costs(model: nn.Module, example: torch.Tensor) -> SampleCost:
    """Count mul-adds of ``model`` on ``example`` (a batch), per sample; leaves the model as found.

    Runs in eval mode (BatchNorm statistics untouched, no dropout draws) and clears the gradients it
    made; parameter values do not change.
    """
    n = len(example)
    was_training = model.training
    saved_grads = [p.grad for p in model.parameters()]
    model.eval()
    try:
        with FlopCounterMode(display=False) as fwd, torch.no_grad():
            model(example)
        with FlopCounterMode(display=False) as both:
            out = model(example)
            out.float().sum().backward()
    finally:
        for p, g in zip(model.parameters(), saved_grads, strict=True):
            p.grad = g
        model.train(was_training)
    return SampleCost(
        forward_muladds=fwd.get_total_flops() / 2 / n, train_muladds=both.get_total_flops() / 2 / n
    )


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

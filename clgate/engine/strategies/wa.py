"""``wa`` (Zhao et al. 2020): weight aligning on iCaRL's herding memory."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from clgate.engine.samples import Samples
from clgate.engine.strategies.base import Strategy, StrategyContext
from clgate.engine.strategies.head import class_rows, head_layers, head_norms
from clgate.engine.strategies.icarl import ICaRL


class WAParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mem_size: int = Field(200, ge=1, description="Exemplars in all, split equally among seen classes.")
    kd_temperature: float = Field(2.0, gt=0, description="Distillation temperature T (the paper's 2).")
    clip: bool = Field(
        True, description="Clip the head's weights to non-negative after every update (part of the method)."
    )
    bias: Literal["zero", "keep"] = Field(
        "zero",
        description="The head's bias: 'zero' holds it at 0 from the first trained task on, as the paper's "
        "classifier, which has none (the imbalance then shows in the weight norms that aligning corrects); "
        "'keep' trains it, as PyCIL, and aligning leaves it alone.",
    )


class WA(ICaRL, Strategy[WAParams]):
    """Weight Aligning (Zhao, Xiao, Gan, Zhang & Xia, CVPR 2020, "Maintaining Discrimination and Fairness
    in Class Incremental Learning"), as the paper and PyCIL's ``wa.py``:

    - exemplars: iCaRL's herding memory (``mem_size // classes seen`` per class, chosen when a task ends);
      as the paper, a task's updates iterate over one shuffled set, the task's new samples and the
      exemplars together (:meth:`task_data`; no separate replay batch), so new classes outnumber old ones
      in every epoch — the imbalance that aligning corrects;
    - loss ``(1 − λ) · CE + λ · KD`` on every sample of the batch (new or exemplar) with
      ``λ = C_old / C_total`` (classes seen before the task over classes seen now); CE over the seen
      classes, KD the distillation of the previous task's model on the old classes' logits at
      temperature ``T``, ``KL(p_old^T ‖ p^T)`` (PyCIL's soft-target cross-entropy less the teacher's
      entropy, a constant: the same gradients), with no ``T²`` factor (as PyCIL);
      λ = 0 on the first task: plain CE;
    - weight clipping: after every update the head's weights are clipped to ≥ 0 (``clip``);
    - no bias: the paper's classifier is ``w·φ(x)``; with ``bias: zero`` (the default) the head's bias is
      set to 0 before each trained task and after every update, so a bias cannot absorb the imbalance
      that aligning corrects (``bias: keep`` trains it, as PyCIL; a first task given as learned keeps its
      bias until task 2 starts);
    - weight aligning: after the task's last update (before its task-end point), the new classes' weight
      vectors — weights only (PyCIL aligns ``fc.weight`` only) — are multiplied by
      ``gamma = mean ‖w_old‖ / mean ‖w_new‖`` (eq. 7–8).

    Predictions are the head's (masked) logits, not iCaRL's nearest mean of exemplars. Train it as the
    paper does, with momentum (and weight decay): with plain SGD at a small rate the cross-entropy, weighed
    ``1 − λ``, takes too small a step and the method ends undertrained (docs/engine.md, "On one budget").
    """

    name = "wa"
    Params: ClassVar[type[BaseModel]] = WAParams
    params: WAParams  # type: ignore[assignment]

    def __init__(self, ctx: StrategyContext, params: WAParams | None = None) -> None:
        super().__init__(ctx, params)  # type: ignore[arg-type]
        self.head = self.features.head
        #: the gamma applied after each task (1.0 where nothing was aligned)
        self.gammas: list[float] = []

    def before_task(self, k: int, data: Samples) -> None:
        """WA predicts with its head, so the new classes need no provisional set; the bias is held at 0
        (``bias: zero``) from here on, the task's new rows of a growing head included."""
        self._hold_bias()

    def kd_weight(self) -> float:
        """λ = C_old / C_total: the classes seen before this task over the classes seen now."""
        old = 0 if self.old is None else len(self.old)
        return old / max(1, int(self.ctx.seen.sum()))

    def task_data(self, k: int, data: Samples) -> Samples:
        """The task's new samples followed by every exemplar held, in stored dtype: one set that the
        task's updates shuffle and iterate over (on the host unless the task's source is on the device)."""
        if self.replay is None:
            return data
        mx, my = self.replay
        x, y = data.take(torch.arange(len(data)))
        return Samples(torch.cat([x, mx.to(x.device)]), torch.cat([y.to(x.device), my.to(x.device)]))

    def expected_train_size(self, k: int, sizes: list[int]) -> int:
        """The task's size plus the exemplars (at most ``mem_size``, at most the samples seen before)."""
        return sizes[k] + min(self.params.mem_size, sum(sizes[:k]))

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.ctx.model(x)
        ce = F.cross_entropy(self.ctx.mask(logits), y)
        lam = self.kd_weight()
        if self.teacher is None or self.old is None or lam == 0:
            return ce
        kd = self._distillation(x, logits, self.params.kd_temperature)
        return (1 - lam) * ce + lam * kd

    def after_step(self, x: torch.Tensor, y: torch.Tensor, *, first_pass: bool) -> None:
        if self.params.clip:
            with torch.no_grad():
                for layer in head_layers(self.head):
                    layer.weight.clamp_(min=0)
        self._hold_bias()

    def _hold_bias(self) -> None:
        if self.params.bias == "zero":
            with torch.no_grad():
                for layer in head_layers(self.head):
                    if layer.bias is not None:
                        layer.bias.zero_()

    def end_training(self, k: int, data: Samples) -> None:
        old = [] if self.old is None else self.old.tolist()
        new = sorted(c for c in data.labels.unique().tolist() if c not in set(old))
        self.gammas.append(align_weights(self.head, old, new) if old and new else 1.0)
        self.herd(data)

    def learned_task(self, k: int, data: Samples) -> None:
        self.herd(data)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.ctx.logits(x)


def align_weights(head: nn.Module, old: list[int], new: list[int]) -> float:
    """Scale the ``new`` classes' weight vectors in ``head`` (weights only, not the bias) by
    ``gamma = mean ‖w_old‖ / mean ‖w_new‖`` (WA, eq. 7); returns gamma.

    >>> head = nn.Linear(2, 3)
    >>> _ = head.weight.data.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]]))
    >>> bias = head.bias.detach().clone()
    >>> round(align_weights(head, [0, 1], [2]), 6), [round(w, 6) for w in head.weight[2].tolist()]
    (0.2, [0.6, 0.8])
    >>> torch.equal(head.bias, bias)
    True
    """
    gamma = float(head_norms(head, old).mean() / head_norms(head, new).mean())
    rows = class_rows(head)
    with torch.no_grad():
        for c in new:
            layer, row = rows[c]
            layer.weight[row] *= gamma
    return gamma

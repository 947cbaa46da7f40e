"""Regularisation without memory: ``lwf`` (distillation) and ``ewc`` (Fisher penalty)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from clgate.engine.samples import Samples
from clgate.engine.strategies.base import Strategy, StrategyContext


class LwFParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(1.0, ge=0, description="Weight of the distillation loss.")
    temperature: float = Field(2.0, gt=0, description="Distillation temperature T.")


class LwF(Strategy[LwFParams]):
    """Learning without Forgetting (Li & Hoiem, ECCV 2016 / TPAMI 2017): besides cross-entropy on the
    new task, distil the previous model's softened outputs (temperature T) on the old classes,
    ``loss = CE + alpha · T² · KL(p_old^T ‖ p_new^T)``, computed on the current batch.
    """

    name = "lwf"
    Params = LwFParams

    def __init__(self, ctx: StrategyContext, params: LwFParams | None = None) -> None:
        super().__init__(ctx, params)
        self.teacher: nn.Module | None = None
        self.old: torch.Tensor | None = None

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.ctx.model(x)
        loss = F.cross_entropy(self.ctx.mask(logits), y)
        if self.teacher is not None and self.params.alpha > 0:
            assert self.old is not None
            t = self.params.temperature
            loss = loss + self.params.alpha * t * t * self._distillation(x, logits, t)
        return loss

    def after_task(self, k: int, data: Samples) -> None:
        self._keep_teacher()


class EWCParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ewc_lambda: float = Field(100.0, ge=0, description="Penalty weight λ.")
    fisher_samples: int = Field(256, ge=1, description="Samples per task for the diagonal Fisher.")


class EWC(Strategy[EWCParams]):
    """Elastic Weight Consolidation (Kirkpatrick et al., PNAS 2017): after each task, the diagonal of
    the empirical Fisher information (mean squared per-sample gradients of the log-likelihood, on up to
    ``fisher_samples`` training samples, BatchNorm in eval mode) is added to a running sum ``F``; later
    updates add ``λ/2 · Σ_i F_i (θ_i − θ*_i)²`` with ``θ*`` the weights at the end of the last task.
    """

    name = "ewc"
    Params = EWCParams

    def __init__(self, ctx: StrategyContext, params: EWCParams | None = None) -> None:
        super().__init__(ctx, params)
        self.fisher: list[torch.Tensor] | None = None
        self.anchor: list[torch.Tensor] | None = None

    def _params(self) -> list[torch.Tensor]:
        return [p for p in self.ctx.model.parameters() if p.requires_grad]

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(self.ctx.logits(x), y)
        if self.fisher is not None and self.params.ewc_lambda > 0:
            assert self.anchor is not None
            penalty = sum(
                (f * (p - a).pow(2)).sum()
                for f, p, a in zip(self.fisher, self._params(), self.anchor, strict=False)
            )
            loss = loss + 0.5 * self.params.ewc_lambda * penalty
        return loss

    def after_task(self, k: int, data: Samples) -> None:
        model = self.ctx.model
        params = self._params()
        n = min(self.params.fisher_samples, len(data))
        pick = torch.randperm(len(data), generator=self.ctx.generator)[:n]
        x, y = self.ctx.read(data, pick)
        fisher = [torch.zeros_like(p) for p in params]
        was_training = model.training
        model.eval()
        try:
            for i in range(n):
                model.zero_grad(set_to_none=True)
                with self.ctx.autocast():
                    loss = F.cross_entropy(self.ctx.logits(x[i : i + 1]), y[i : i + 1])
                loss.backward()
                for f, p in zip(fisher, params, strict=True):
                    if p.grad is not None:
                        f.add_(p.grad.detach().pow(2), alpha=1.0 / n)
        finally:
            model.zero_grad(set_to_none=True)
            model.train(was_training)
        self.extra_train_samples += n
        self.fisher = (
            fisher if self.fisher is None else [a + b for a, b in zip(self.fisher, fisher, strict=False)]
        )
        self.anchor = [p.detach().clone() for p in params]

"""``derpp`` (Buzzega et al. 2020, DER++): a reservoir of inputs, labels and the logits at insertion."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from clgate.engine.samples import Samples
from clgate.engine.strategies.base import Strategy, StrategyContext
from clgate.engine.strategies.head import EvalMode
from clgate.engine.strategies.memory import SampleMemory


class DERParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mem_size: int = Field(200, ge=1, description="Memory size M (samples, with their logits).")
    alpha: float = Field(0.2, ge=0, description="Weight of the logit-matching (MSE) term.")
    beta: float = Field(1.0, ge=0, description="Weight of the replayed labels' cross-entropy term.")
    replay_batch_size: int | None = Field(
        None, ge=1, description="Replay samples per term and update (default: batch size)."
    )


class DERpp(Strategy[DERParams]):
    """DER++ (Buzzega, Boschini, Porrello, Abati & Calderara, NeurIPS 2020, "Dark Experience for General
    Continual Learning"): a reservoir memory (Vitter's algorithm R over the stream of training samples,
    each entering once, in its task's first epoch) keeps each sample's input, label and the logits the
    model gave it when it was written. ``loss = CE(x, y) + alpha · MSE(f(x'), z') + beta · CE(f(x''), y'')``
    with ``(x', z')`` and ``(x'', y'')`` two independent draws from the memory (eq. 6). The logits ``z``
    are the raw outputs of the update's forward pass (before its step, as the authors' code), kept for the
    classes seen at insertion: with a growing head, later classes are not compared.
    """

    name = "derpp"
    Params = DERParams

    def __init__(self, ctx: StrategyContext, params: DERParams | None = None) -> None:
        super().__init__(ctx, params)
        self.memory = SampleMemory(self.params.mem_size, ctx.device)
        self.targets = torch.zeros(self.params.mem_size, ctx.n_classes, device=ctx.device)
        self.width = torch.zeros(self.params.mem_size, ctx.n_classes, dtype=torch.bool, device=ctx.device)
        self.n_seen = 0
        self.last_logits: torch.Tensor | None = None

    def before_task(self, k: int, data: Samples) -> None:
        self.memory.expect(data)

    def _draw(self) -> torch.Tensor:
        n = self.params.replay_batch_size or self.ctx.batch_size
        self.extra_train_samples += n
        return torch.randint(self.memory.filled, (n,), generator=self.ctx.generator).to(self.ctx.device)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = self.ctx.model(x)
        self.last_logits = out.detach()
        loss = F.cross_entropy(self.ctx.mask(out), y)
        if self.memory.filled and self.params.alpha > 0:
            idx = self._draw()
            mx, _ = self.memory.inputs(idx)
            width = self.width[idx]
            got = self.ctx.model(mx).masked_fill(~width, 0.0)
            mse = ((got - self.targets[idx]) ** 2).sum() / width.sum().clamp(min=1)
            loss = loss + self.params.alpha * mse
        if self.memory.filled and self.params.beta > 0:
            mx, my = self.memory.inputs(self._draw())
            loss = loss + self.params.beta * F.cross_entropy(self.ctx.logits(mx), my)
        return loss

    def after_step(self, x: torch.Tensor, y: torch.Tensor, *, first_pass: bool) -> None:
        if first_pass and self.last_logits is not None:
            self.observe(x, y, self.last_logits)

    def observe(self, x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> None:
        """Reservoir-insert the batch ``(x, y)`` with the ``logits`` the model gave it."""
        mem = self.memory
        writes: dict[int, int] = {}
        for i, c in enumerate(y.tolist()):
            self.n_seen += 1
            if mem.filled < mem.size:
                writes[mem.place(None, c)] = i
            elif (j := self.ctx.rng.randrange(self.n_seen)) < mem.size:
                writes[mem.place(j, c)] = i
        if writes:
            mem.write(x, y, writes)
            dst = torch.tensor(list(writes.keys()), device=self.ctx.device)
            src = torch.tensor(list(writes.values()), device=logits.device)
            self.width[dst] = self.ctx.seen
            self.targets[dst] = logits[src].float().masked_fill(~self.ctx.seen, 0.0).to(self.ctx.device)

    def learned_task(self, k: int, data: Samples) -> None:
        self.memory.expect(data)
        order = torch.randperm(len(data), generator=self.ctx.generator)
        with EvalMode(self.ctx.model):
            for x, y in self.ctx.stream(data, order):
                self.observe(x, y, self.ctx.model(x))
        self.extra_forward_samples += len(data)

    def buffer_bytes(self) -> int:
        n = self.memory.filled
        return self.memory.nbytes() + n * self.ctx.n_classes * (self.targets.element_size() + 1)

"""``icarl`` (Rebuffi et al. 2017): herding exemplars and the nearest-mean-of-exemplars classifier."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from clgate.engine.errors import StrategyError
from clgate.engine.samples import Samples, model_input
from clgate.engine.strategies.base import Strategy, StrategyContext
from clgate.engine.strategies.head import EvalMode, FeatureTap, find_head


def herding(features: torch.Tensor, m: int) -> list[int]:
    """iCaRL's herding selection (Rebuffi et al. 2017, Algorithm 4): the rows of ``features`` (one class's
    samples) chosen one by one, each the sample whose addition brings the mean of the chosen ones closest
    to the class mean, on L2-normalised features; in priority order (a prefix is the smaller memory).

    >>> herding(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), 2)
    [2, 0]
    """
    f = F.normalize(features.float(), dim=1)
    mu = f.mean(dim=0)
    chosen: list[int] = []
    running = torch.zeros_like(mu)
    free = torch.ones(len(f), dtype=torch.bool, device=f.device)
    for k in range(1, min(m, len(f)) + 1):
        distance = (mu - (running + f) / k).norm(dim=1).masked_fill(~free, float("inf"))
        i = int(distance.argmin())
        chosen.append(i)
        free[i] = False
        running += f[i]
    return chosen


def nme_scores(features: torch.Tensor, means: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
    """Nearest-mean-of-exemplars scores (iCaRL, Algorithm 1): minus the distance of each L2-normalised
    feature vector to each class mean (rows of ``means``); −inf for classes without one (``~known``).

    >>> means = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    >>> nme_scores(torch.tensor([[0.2, 0.9]]), means, torch.tensor([True, True, False])).argmax(1)
    tensor([1])
    """
    distance = torch.cdist(F.normalize(features.float(), dim=1), means.float())
    return (-distance).masked_fill(~known, float("-inf"))


def _share(m: int, n: int, i: int) -> int:
    """Set ``i``'s share of a class's ``m`` exemplars split among its ``n`` sets, the first ones taking
    the remainder.

    >>> [_share(7, 3, i) for i in range(3)], [_share(2, 3, i) for i in range(3)]
    ([3, 2, 2], [1, 1, 0])
    """
    return m // n + (i < m % n)


class ICaRLParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mem_size: int = Field(200, ge=1, description="Exemplars in all, split equally among seen classes.")
    replay_batch_size: int | None = Field(
        None, ge=1, description="Exemplars replayed per update (default: batch size)."
    )
    alpha: float = Field(1.0, ge=0, description="Weight of the distillation loss on old classes.")
    temperature: float = Field(2.0, gt=0, description="Distillation temperature T.")


class ICaRL(Strategy[ICaRLParams]):
    """iCaRL (Rebuffi, Kolesnikov, Sperl & Lampert, CVPR 2017, "iCaRL: Incremental Classifier and
    Representation Learning"). Exemplars: ``mem_size // classes seen`` per class, chosen by herding on
    the model's L2-normalised features when a task ends (Algorithm 4; the older classes' sets cut to
    their first ones, Algorithm 5). Training: each update's batch plus a replay batch of exemplars, with
    cross-entropy and a distillation of the previous model's outputs on the old classes — the common
    CE + KD variant (``CE + alpha · T² · KL(p_old^T ‖ p_new^T)``, as LwF), not the paper's sigmoid
    binary cross-entropy. Prediction: the nearest mean of exemplars (Algorithm 1): class means of the
    normalised features of the exemplars (re-normalised), recomputed with the current model at each
    evaluation point; a class of the task being learned is represented, until its exemplars are chosen,
    by as many random samples of its own. Features are the input of the model's head (:func:`find_head`).
    """

    name = "icarl"
    Params: ClassVar[type[BaseModel]] = ICaRLParams

    def __init__(self, ctx: StrategyContext, params: ICaRLParams | None = None) -> None:
        super().__init__(ctx, params)
        if self.params.mem_size < ctx.n_classes:
            raise StrategyError(
                f"strategy.params.mem_size: {self.name} keeps at least one exemplar per class; "
                f"{self.params.mem_size} < {ctx.n_classes} classes"
            )
        self.features = FeatureTap(ctx.model, find_head(ctx.model, ctx.n_classes, strategy=self.name))
        #: class → its exemplar sets (stored dtype), one per task that brought the class, each by priority
        self.cells: dict[int, list[torch.Tensor]] = {}
        self.exemplars: dict[int, torch.Tensor] = {}  # class → its exemplars: its sets, in task order
        self.provisional: dict[int, torch.Tensor] = {}  # the current task's classes until it ends
        self.replay: tuple[torch.Tensor, torch.Tensor] | None = None
        self.teacher: nn.Module | None = None
        self.old: torch.Tensor | None = None
        self.means: tuple[torch.Tensor, torch.Tensor] | None = None

    def _quota(self, n_classes: int) -> int:
        return self.params.mem_size // max(1, n_classes)

    def before_task(self, k: int, data: Samples) -> None:
        labels = data.labels
        new = [c for c in labels.unique().tolist() if c not in self.exemplars]
        m = self._quota(len(self.exemplars) + len(new))
        for c in new:
            where = (labels == c).nonzero().flatten()
            pick = where[torch.randperm(len(where), generator=self.ctx.generator)[:m]]
            self.provisional[c] = data.take(pick)[0].to(self.ctx.device)
        self.means = None

    def replayed(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The update's batch with a replay batch of exemplars (drawn uniformly) appended, once any exist."""
        if self.replay is not None:
            mx, my = self.replay
            n = self.params.replay_batch_size or self.ctx.batch_size
            idx = torch.randint(len(my), (n,), generator=self.ctx.generator).to(self.ctx.device)
            x = torch.cat([x, model_input(mx[idx])])
            y = torch.cat([y, my[idx]])
            self.extra_train_samples += n
        return x, y

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = self.replayed(x, y)
        logits = self.ctx.model(x)
        loss = F.cross_entropy(self.ctx.mask(logits), y)
        if self.teacher is not None and self.old is not None and self.params.alpha > 0:
            t = self.params.temperature
            loss = loss + self.params.alpha * t * t * self._distillation(x, logits, t)
        return loss

    def after_step(self, x: torch.Tensor, y: torch.Tensor, *, first_pass: bool) -> None:
        self.means = None  # the features moved

    def end_training(self, k: int, data: Samples) -> None:
        self._select(data)

    def learned_task(self, k: int, data: Samples) -> None:
        self._select(data)

    def _select(self, data: Samples) -> None:
        self.herd(data)
        self.means = self._class_means()
        self.extra_forward_samples += sum(len(v) for v in self.exemplars.values())

    def herd(self, data: Samples) -> None:
        """Herding exemplars for ``data``'s classes; the older sets cut to the new quota.

        A class's ``mem_size // classes seen`` exemplars are split equally among the tasks that brought
        its samples (the earlier tasks take the remainder): with new classes only (NC) each class has one
        set, iCaRL's; when a task brings new samples of a known class (NI, NIC) the class gets a set
        herded from them, and its earlier sets keep their first exemplars — so its class mean spans
        every group it was seen in."""
        labels = data.labels
        present = labels.unique().tolist()
        m = self._quota(len(self.cells) + sum(c not in self.cells for c in present))
        with EvalMode(self.ctx.model):
            feats = torch.cat([self.features(x) for x, _ in self.ctx.stream(data, torch.arange(len(data)))])
        self.extra_forward_samples += len(data)
        for c in present:
            sets = self.cells.setdefault(c, [])
            where = (labels == c).nonzero().flatten()
            pick = where[herding(feats[where.to(feats.device)], _share(m, len(sets) + 1, len(sets)))]
            sets.append(data.take(pick)[0].to(self.ctx.device))
        for c, sets in self.cells.items():
            self.cells[c] = [v[: _share(m, len(sets), i)] for i, v in enumerate(sets)]
            self.exemplars[c] = torch.cat(self.cells[c])
        self.provisional = {}
        mx = torch.cat(list(self.exemplars.values()))
        my = torch.cat([torch.full((len(v),), c, dtype=torch.long) for c, v in self.exemplars.items()])
        self.replay = (mx, my.to(self.ctx.device))

    def after_task(self, k: int, data: Samples) -> None:
        self._keep_teacher()

    def _class_means(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each class's mean of normalised exemplar features (re-normalised), and which classes have one."""
        sets = {**self.exemplars, **self.provisional}
        means: torch.Tensor | None = None
        known = torch.zeros(self.ctx.n_classes, dtype=torch.bool, device=self.ctx.device)
        with EvalMode(self.ctx.model):
            for c, stored in sets.items():
                f = torch.cat([self.features(model_input(b)) for b in stored.split(256)])
                mu = F.normalize(F.normalize(f, dim=1).mean(dim=0), dim=0)
                if means is None:
                    means = torch.zeros(self.ctx.n_classes, len(mu), device=self.ctx.device)
                means[c] = mu
                known[c] = True
        if means is None:
            raise StrategyError("icarl: no exemplar yet to predict with")
        return means, known

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        if self.means is None:
            self.means = self._class_means()
        means, known = self.means
        return nme_scores(self.features(x), means, known)

    def buffer_bytes(self) -> int:
        sets = [*self.exemplars.values(), *self.provisional.values()]
        return int(sum(v.nbytes + 8 * len(v) for v in sets))

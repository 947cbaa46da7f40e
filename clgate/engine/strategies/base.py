"""The strategy interface: :class:`Strategy` (its hooks), :class:`StrategyContext` (what a strategy may
use) and the two bounds, ``finetune`` and ``joint``."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict
from torch import nn

from clgate.engine.samples import Samples, iterate_batches


@dataclass
class StrategyContext:
    """What a strategy may use: the model, the class mask, the device, seeded random streams."""

    model: nn.Module
    n_classes: int
    device: torch.device
    seed: int
    batch_size: int
    predict_over: str = "seen"
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext
    seen: torch.Tensor = field(init=False)
    generator: torch.Generator = field(init=False)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.seen = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        # Separate from the runner's batch-order stream: strategy draws never shift the batches.
        self.generator = torch.Generator().manual_seed(self.seed + 1_000_003)
        self.rng = random.Random(self.seed + 2_000_003)

    def mask(self, logits: torch.Tensor, classes: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of classes outside ``classes`` (default: the seen ones) set to −inf when masking."""
        if self.predict_over == "all" and classes is None:
            return logits
        keep = self.seen if classes is None else classes
        return logits.masked_fill(~keep, float("-inf"))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The model's (masked) logits; what training and evaluation both predict over."""
        return self.mask(self.model(x))

    def read(self, data: Samples, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples of ``data`` at ``positions`` as model input and labels on the device."""
        ((x, y),) = iterate_batches(data, [positions], self.device, workers=0)
        return x, y

    def stream(
        self, data: Samples, order: torch.Tensor, chunk: int = 256
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The samples of ``data`` in ``order``, as model-input batches of ``chunk`` on the device."""
        return iterate_batches(data, order.split(chunk), self.device)


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: A strategy's hyper-parameters: its own pydantic model (``Params``), e.g. :class:`ERParams`.
P = TypeVar("P", bound=BaseModel)


class Strategy(Generic[P]):
    """Base strategy: plain cross-entropy on the current task's batches (no protection).

    A subclass names its hyper-parameter model twice: as ``Params`` (what the spec's
    ``strategy.params`` are validated with) and as the type argument (``class ER(Strategy[ERParams])``),
    so that ``self.params`` is typed.
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]] = NoParams
    params: P
    #: the frozen model of the previous tasks and the classes it knew (strategies that distill)
    teacher: nn.Module | None = None
    old: torch.Tensor | None = None

    def __init__(self, ctx: StrategyContext, params: P | None = None) -> None:
        self.ctx = ctx
        self.params = params if params is not None else cast(P, self.Params())
        #: samples passed forward+backward outside the runner's batches (replay, Fisher …)
        self.extra_train_samples = 0
        #: samples passed forward only (teacher outputs …)
        self.extra_forward_samples = 0

    # ---------------------------------------------------------------- hooks
    def before_task(self, k: int, data: Samples) -> None:
        """Called before task ``k`` (0-based) starts, with its training data."""

    def learned_task(self, k: int, data: Samples) -> None:
        """Task ``k`` is already learned by the candidate (``first_task_learned``): called instead of
        ``before_task``/updates, so that the strategy can take the task's data into its memory."""

    def task_data(self, k: int, data: Samples) -> Samples:
        """The data task ``k``'s updates iterate over (default: the task's own)."""
        return data

    def expected_train_size(self, k: int, sizes: list[int]) -> int:
        """How many samples :meth:`task_data` will return for task ``k`` (for progress/ETA)."""
        return sizes[k]

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.ctx.logits(x), y)

    def after_step(self, x: torch.Tensor, y: torch.Tensor, *, first_pass: bool) -> None:
        """After each update; ``first_pass`` is true during the first epoch over the task's data."""

    def end_training(self, k: int, data: Samples) -> None:
        """After task ``k``'s last update, before its task-end evaluation point (WA aligns its head
        here, iCaRL chooses its exemplars): what this does shows in the task-end point."""

    def after_task(self, k: int, data: Samples) -> None:
        """After task ``k``'s last update (and its task-end evaluation)."""

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Scores per class (the largest is the prediction) for a model-input batch of held-out inputs:
        what every evaluation point predicts with, called in eval mode under ``torch.inference_mode()``.
        Default: the model's masked logits; iCaRL's nearest-mean-of-exemplars classifier overrides it."""
        return self.ctx.logits(x)

    # ---------------------------------------------------------------- distillation (LwF, iCaRL, WA)
    def _keep_teacher(self) -> None:
        """Freeze a copy of the model as the teacher of the next tasks, and remember the classes it knew."""
        self.teacher = copy.deepcopy(self.ctx.model).eval()
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.old = self.ctx.seen.nonzero().flatten().clone()

    def _distillation(self, x: torch.Tensor, logits: torch.Tensor, t: float) -> torch.Tensor:
        """KL divergence at temperature ``t`` from the teacher's to ``logits`` on the old classes."""
        assert self.teacher is not None and self.old is not None
        with torch.no_grad():
            target = self.teacher(x)[:, self.old]
        self.extra_forward_samples += len(x)
        return F.kl_div(
            F.log_softmax(logits[:, self.old] / t, dim=1),
            F.log_softmax(target / t, dim=1),
            reduction="batchmean",
            log_target=True,
        )

    def buffer_bytes(self) -> int:
        """Bytes of past data held (replay memory) now."""
        return 0


class Finetune(Strategy[NoParams]):
    """Naive fine-tuning: cross-entropy on the new task only — the lower bound (catastrophic
    forgetting; McCloskey & Cohen 1989, used as baseline by De Lange et al. 2023)."""

    name = "finetune"


class Joint(Strategy[NoParams]):
    """Joint (cumulative) retraining on all data of tasks 1 … k — the upper bound used by
    De Lange et al. 2023 and van de Ven et al. 2022 ("Three types of incremental learning")."""

    name = "joint"

    def __init__(self, ctx: StrategyContext, params: NoParams | None = None) -> None:
        super().__init__(ctx, params)
        self._data: Samples | None = None  # tasks 1 … k: indices into the training set, read per batch

    def task_data(self, k: int, data: Samples) -> Samples:
        self.learned_task(k, data)
        assert self._data is not None
        return self._data

    def learned_task(self, k: int, data: Samples) -> None:
        self._data = data if self._data is None else self._data + data

    def expected_train_size(self, k: int, sizes: list[int]) -> int:
        return sum(sizes[: k + 1])

    def buffer_bytes(self) -> int:
        return 0 if self._data is None else self._data.input_nbytes

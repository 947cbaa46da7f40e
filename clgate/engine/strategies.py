"""Continual-learning strategies: a small registry of built-ins plus plugins.

A strategy sees the run through hooks called by the runner (:mod:`clgate.engine.runner`):

``before_task(k, data)`` → ``task_data(k, data)`` (what the task's updates iterate over) →
per update ``loss(x, y)`` then ``after_step(x, y, first_pass=…)`` → ``end_training(k, data)`` → the
task-end evaluation point → ``after_task(k, data)``. Every evaluation point predicts with
``predict(x)`` (default: the masked logits).

``data`` is the task's training set as :class:`~clgate.engine.samples.Samples`: on the host in its
stored dtype (an image folder is not even decoded), read per batch — :meth:`StrategyContext.read`
gives chosen samples as model input on the device. ``x, y`` of ``loss``/``after_step`` are the
update's batch, on the device. The optimizer is rebuilt at the start of every task.
Built-ins: ``finetune``, ``joint``, ``er``, ``gdumb``, ``lwf``, ``ewc``, ``wa``, ``icarl``, ``derpp``.

Third-party strategies: a subclass of :class:`Strategy` with a ``name`` and a pydantic ``Params``
model, published in the ``clgate.strategies`` entry-point group of its distribution::

    [project.entry-points."clgate.strategies"]
    mystrategy = "mypackage.cl:MyStrategy"

>>> sorted(BUILTIN_STRATEGIES)
['derpp', 'er', 'ewc', 'finetune', 'gdumb', 'icarl', 'joint', 'lwf', 'wa']
>>> get_strategy("er").Params().mem_size
200
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar, Generic, Literal, TypeVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import nn

from clgate.engine.errors import StrategyError
from clgate.engine.models import GrowingLinear
from clgate.engine.samples import Samples, iterate_batches, model_input
from clgate.schemas.errors import problems_of

ENTRY_POINT_GROUP = "clgate.strategies"


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


def stored_dtype(data: Samples) -> torch.dtype:
    """The dtype ``data`` is stored in (uint8 for images), as a torch dtype."""
    if isinstance(data.x, torch.Tensor):
        return data.x.dtype
    return torch.from_numpy(np.empty(0, dtype=data.x.dtype)).dtype


def as_stored(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Model input ``x`` back in stored dtype ``dtype`` (``None``: as is), the inverse of
    :func:`~clgate.engine.samples.model_input`: a uint8 image became ``k / 255`` in float32, and
    ``round(255 · (k / 255)) == k`` for every ``k`` in 0 … 255, so the round trip is exact and the
    memory's samples, converted per batch again, are bit for bit the model input they came from."""
    if dtype is None or x.dtype == dtype:
        return x
    if dtype == torch.uint8:
        return (x * 255.0).round_().clamp_(0, 255).to(torch.uint8)
    return x.to(dtype)


class _Memory:
    """A fixed-size sample memory on the device, with per-class slot bookkeeping on the host.

    Inputs are held in their stored dtype (``dtype``: uint8 for images, a quarter of the float32 model
    input), converted per batch by :meth:`inputs`; ``None`` until a strategy names it: then as written.
    """

    def __init__(self, size: int, device: torch.device) -> None:
        self.size = size
        self.device = device
        self.dtype: torch.dtype | None = None
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None
        self.labels: list[int] = []
        self.slots: dict[int, list[int]] = {}

    @property
    def filled(self) -> int:
        return len(self.labels)

    def expect(self, data: Samples) -> None:
        """Hold inputs the way ``data`` stores them."""
        if self.dtype is None:
            self.dtype = stored_dtype(data)

    def _alloc(self, x: torch.Tensor) -> None:
        if self.x is None:
            self.x = torch.empty((self.size, *x.shape[1:]), dtype=x.dtype, device=self.device)
            self.y = torch.empty(self.size, dtype=torch.long, device=self.device)

    def write(self, x: torch.Tensor, y: torch.Tensor, writes: dict[int, int]) -> None:
        """Apply ``slot → batch index`` writes with one indexed copy; ``x`` is model input or stored."""
        if not writes:
            return
        src = torch.tensor(list(writes.values()), device=x.device)
        rows = as_stored(x[src], self.dtype)
        self._alloc(rows)
        assert self.x is not None and self.y is not None
        dst = torch.tensor(list(writes.keys()), device=self.device)
        self.x[dst] = rows.to(self.device)
        self.y[dst] = y[src].to(self.device)

    def inputs(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples at slots ``idx`` as model input, and their labels."""
        assert self.x is not None and self.y is not None
        return model_input(self.x[idx]), self.y[idx]

    def place(self, slot: int | None, label: int) -> int:
        """Book ``label`` into ``slot`` (``None``: the next free one); returns the slot."""
        if slot is None:
            slot = len(self.labels)
            self.labels.append(label)
        else:
            old = self.labels[slot]
            self.slots[old].remove(slot)
            self.labels[slot] = label
        self.slots.setdefault(label, []).append(slot)
        return slot

    def largest_classes(self) -> list[int]:
        most = max(len(s) for s in self.slots.values())
        return [c for c, s in self.slots.items() if len(s) == most]

    def nbytes(self) -> int:
        """Bytes held: the filled slots' stored inputs and int64 labels."""
        if self.x is None or self.y is None:
            return 0
        n = self.filled
        return int(self.x[0].nbytes * n + self.y[0].nbytes * n)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled slots, inputs in stored dtype."""
        assert self.x is not None and self.y is not None
        return self.x[: self.filled], self.y[: self.filled]


class ERParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mem_size: int = Field(200, ge=1, description="Memory size M (samples).")
    replay_batch_size: int | None = Field(
        None, ge=1, description="Replay samples per update (default: batch size)."
    )


class ER(Strategy[ERParams]):
    """Experience replay with a class-balanced reservoir memory of ``mem_size`` samples.

    Each update trains on the new batch and, beside it, a replay batch drawn uniformly from the memory
    (Chaudhry et al. 2019, "On Tiny Episodic Memories in Continual Learning"; the ER of De Lange et al.
    2023). The memory is filled by class-balancing reservoir sampling (Chrysakis & Moens, ICML 2020,
    CBRS): while free, every sample is stored; when full, a sample of a class that is not among the
    largest replaces a random sample of a largest class, otherwise it replaces a random sample of its
    own class with probability ``m_c / n_c`` (reservoir sampling within the class). Each training
    sample enters the stream once (during the first epoch over its task).
    """

    name = "er"
    Params = ERParams

    def __init__(self, ctx: StrategyContext, params: ERParams | None = None) -> None:
        super().__init__(ctx, params)
        self.memory = _Memory(self.params.mem_size, ctx.device)
        self.seen_counts: dict[int, int] = {}

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mem = self.memory
        if mem.filled:
            n = self.params.replay_batch_size or self.ctx.batch_size
            idx = torch.randint(mem.filled, (n,), generator=self.ctx.generator).to(self.ctx.device)
            mx, my = mem.inputs(idx)
            x = torch.cat([x, mx])
            y = torch.cat([y, my])
            self.extra_train_samples += n
        return F.cross_entropy(self.ctx.logits(x), y)

    def before_task(self, k: int, data: Samples) -> None:
        self.memory.expect(data)

    def after_step(self, x: torch.Tensor, y: torch.Tensor, *, first_pass: bool) -> None:
        if first_pass:
            self.observe(x, y)

    def learned_task(self, k: int, data: Samples) -> None:
        self.memory.expect(data)
        order = torch.randperm(len(data), generator=self.ctx.generator)
        for x, y in self.ctx.stream(data, order):
            self.observe(x, y)

    def observe(self, x: torch.Tensor, y: torch.Tensor) -> None:
        mem, rng = self.memory, self.ctx.rng
        writes: dict[int, int] = {}
        for i, c in enumerate(y.tolist()):
            n_c = self.seen_counts.get(c, 0) + 1
            self.seen_counts[c] = n_c
            if mem.filled < mem.size:
                writes[mem.place(None, c)] = i
                continue
            largest = mem.largest_classes()
            if c not in largest:
                victim_class = largest[rng.randrange(len(largest))]
                slot = mem.slots[victim_class][rng.randrange(len(mem.slots[victim_class]))]
                writes[mem.place(slot, c)] = i
            else:
                m_c = len(mem.slots[c])
                if rng.random() < m_c / n_c:
                    slot = mem.slots[c][rng.randrange(m_c)]
                    writes[mem.place(slot, c)] = i
        mem.write(x, y, writes)

    def buffer_bytes(self) -> int:
        return self.memory.nbytes()


class GDumbParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mem_size: int = Field(200, ge=1, description="Memory size M (samples).")


class GDumb(Strategy[GDumbParams]):
    """GDumb (Prabhu, Torr & Dokania, ECCV 2020): a greedy class-balanced memory of ``mem_size``
    samples; at each task the model is reset to the candidate's initial weights and trained from
    scratch on the memory only. The task's updates are the ones on the memory.
    """

    name = "gdumb"
    Params = GDumbParams

    def __init__(self, ctx: StrategyContext, params: GDumbParams | None = None) -> None:
        super().__init__(ctx, params)
        self.memory = _Memory(self.params.mem_size, ctx.device)
        self.initial_state = {k: v.detach().clone() for k, v in ctx.model.state_dict().items()}
        self.n_seen = 0

    def before_task(self, k: int, data: Samples) -> None:
        self._fill(data)
        self.ctx.model.load_state_dict(self.initial_state)

    def learned_task(self, k: int, data: Samples) -> None:
        self._fill(data)

    def _fill(self, data: Samples) -> None:
        """Plan the greedy fill on the labels alone, then read only the samples that enter the memory."""
        mem, rng = self.memory, self.ctx.rng
        order = torch.randperm(len(data), generator=self.ctx.generator)
        labels = data.labels
        writes: dict[int, int] = {}
        classes_seen = set(mem.slots) | set(labels.unique().tolist())
        quota = mem.size / max(1, len(classes_seen))
        for i, c in enumerate(labels[order].tolist()):
            if mem.filled < mem.size:
                writes[mem.place(None, c)] = i
            elif len(mem.slots.get(c, ())) < quota:
                largest = mem.largest_classes()
                victim_class = largest[rng.randrange(len(largest))]
                slot = mem.slots[victim_class][rng.randrange(len(mem.slots[victim_class]))]
                writes[mem.place(slot, c)] = i
        if writes:
            mem.expect(data)
            xs, ys = data.take(order[list(writes.values())])  # stored dtype: what the memory holds
            mem.write(xs, ys, {slot: j for j, slot in enumerate(writes)})

    def task_data(self, k: int, data: Samples) -> Samples:
        mx, my = self.memory.tensors()
        return Samples(mx.clone(), my.clone())

    def expected_train_size(self, k: int, sizes: list[int]) -> int:
        return min(self.params.mem_size, sum(sizes[: k + 1]))

    def buffer_bytes(self) -> int:
        return self.memory.nbytes()


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


# ---------------------------------------------------------------------- the head and the features
def find_head(model: nn.Module, n_classes: int, *, strategy: str) -> nn.Module:
    """The model's classification head: its last ``nn.Linear`` with ``n_classes`` outputs, or its growing
    head (:class:`~clgate.engine.models.GrowingLinear`), in module order.

    The convention WA and iCaRL rely on: the head's rows are the classes' weight vectors, and its input
    is the model's feature vector (its penultimate layer). A model without one (a TorchScript model's
    layers cannot be seen or hooked either) is a :class:`StrategyError`.
    """
    growing = [m for m in model.modules() if isinstance(m, GrowingLinear)]
    blocks = {id(b) for g in growing for b in g.blocks}
    heads = [
        m
        for m in model.modules()
        if isinstance(m, GrowingLinear)
        or (isinstance(m, nn.Linear) and m.out_features == n_classes and id(m) not in blocks)
    ]
    if not heads:
        raise StrategyError(
            f"strategy.name: {strategy} needs the model's head, its last nn.Linear with {n_classes} "
            "outputs (or a growing head); this model has none (a TorchScript model's layers cannot be "
            "reached): use a built-in architecture or safetensors weights with model.arch"
        )
    return heads[-1]


def class_rows(head: nn.Module) -> dict[int, tuple[nn.Linear, int]]:
    """Where each class's weight vector lives in ``head``: class → (linear layer, row)."""
    if isinstance(head, GrowingLinear):
        out: dict[int, tuple[nn.Linear, int]] = {}
        classes = head.classes.tolist()
        for block in head.blocks:
            assert isinstance(block, nn.Linear)
            for row in range(block.out_features):
                out[classes[len(out)]] = (block, row)
        return out
    assert isinstance(head, nn.Linear)
    return {c: (head, c) for c in range(head.out_features)}


def head_layers(head: nn.Module) -> list[nn.Linear]:
    """The linear layers that hold ``head``'s class rows (one, or a growing head's blocks)."""
    return list({id(lin): lin for lin, _ in class_rows(head).values()}.values())


def head_norms(head: nn.Module, classes: list[int]) -> torch.Tensor:
    """The L2 norms of ``classes``' weight vectors in ``head``."""
    rows = class_rows(head)
    return torch.stack([rows[c][0].weight[rows[c][1]].detach().float().norm() for c in classes])


class FeatureTap:
    """The model's features for a batch: the input of its head, caught by a forward pre-hook while the
    model runs (flattened to ``(N, D)``)."""

    def __init__(self, model: nn.Module, head: nn.Module) -> None:
        self.model, self.head = model, head

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        caught: list[torch.Tensor] = []
        handle = self.head.register_forward_pre_hook(lambda _m, args: caught.append(args[0]))
        try:
            self.model(x)
        finally:
            handle.remove()
        if not caught:
            raise StrategyError("strategy.name: the model's forward never called its head")
        return caught[-1].flatten(1).float()


class _EvalMode:
    """The model in eval mode, without gradients, for a feature pass; its mode restored afterwards."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.was_training = model.training
        self.no_grad = torch.no_grad()

    def __enter__(self) -> None:
        self.model.eval()
        self.no_grad.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.no_grad.__exit__(*exc)
        self.model.train(self.was_training)


# ---------------------------------------------------------------------- iCaRL
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
        self.exemplars: dict[int, torch.Tensor] = {}  # class → its exemplars (stored dtype), by priority
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
        """Herding exemplars for ``data``'s classes; the older classes' sets cut to the new quota."""
        labels = data.labels
        new = [c for c in labels.unique().tolist() if c not in self.exemplars]
        m = self._quota(len(self.exemplars) + len(new))
        for c in self.exemplars:
            self.exemplars[c] = self.exemplars[c][:m]
        with _EvalMode(self.ctx.model):
            feats = torch.cat([self.features(x) for x, _ in self.ctx.stream(data, torch.arange(len(data)))])
        self.extra_forward_samples += len(data)
        for c in new:
            where = (labels == c).nonzero().flatten()
            pick = where[herding(feats[where.to(feats.device)], m)]
            self.exemplars[c] = data.take(pick)[0].to(self.ctx.device)
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
        with _EvalMode(self.ctx.model):
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


# ---------------------------------------------------------------------- WA
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

    Predictions are the head's (masked) logits, not iCaRL's nearest mean of exemplars.
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


# ---------------------------------------------------------------------- DER++
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
        self.memory = _Memory(self.params.mem_size, ctx.device)
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
        with _EvalMode(self.ctx.model):
            for x, y in self.ctx.stream(data, order):
                self.observe(x, y, self.ctx.model(x))
        self.extra_forward_samples += len(data)

    def buffer_bytes(self) -> int:
        n = self.memory.filled
        return self.memory.nbytes() + n * self.ctx.n_classes * (self.targets.element_size() + 1)


BUILTIN_STRATEGIES: dict[str, type[Strategy[Any]]] = {
    cls.name: cls for cls in (Finetune, Joint, ER, GDumb, LwF, EWC, WA, ICaRL, DERpp)
}


# ---------------------------------------------------------------------- registry
def available_strategies() -> dict[str, type[Strategy[Any]]]:
    """Built-ins plus every ``clgate.strategies`` entry point (loaded now; a broken plugin is an error)."""
    found = dict(BUILTIN_STRATEGIES)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN_STRATEGIES:
            continue  # the built-ins are registered once, above; a plugin cannot replace one
        try:
            cls = ep.load()
        except Exception as exc:
            raise StrategyError(f"strategy plugin {ep.name!r} ({ep.value}) cannot be loaded: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise StrategyError(
                f"strategy plugin {ep.name!r} ({ep.value}) is not a "
                "clgate.engine.strategies.Strategy subclass"
            )
        found[ep.name] = cls
    return found


def get_strategy(name: str) -> type[Strategy[Any]]:
    if name in BUILTIN_STRATEGIES:
        return BUILTIN_STRATEGIES[name]
    found = available_strategies()
    if name not in found:
        raise StrategyError(
            f"strategy.name: unknown strategy {name!r} (available: {', '.join(sorted(found))})"
        )
    return found[name]


def create_strategy(
    name: str, params: dict[str, Any], ctx: StrategyContext
) -> tuple[Strategy[Any], list[str]]:
    """Build a strategy and validate its hyper-parameters.

    Returns the strategy and the names of ignored parameters: a parameter that this strategy does
    not take but another registered strategy does (so one spec can switch ``strategy.name``) is
    ignored; any other unknown parameter is an error.
    """
    cls = get_strategy(name)
    own = set(cls.Params.model_fields)
    others = {p for c in available_strategies().values() for p in c.Params.model_fields}
    ignored = sorted(k for k in params if k not in own and k in others)
    kept = {k: v for k, v in params.items() if k not in ignored}
    try:
        parsed = cls.Params.model_validate(kept)
    except ValidationError as exc:
        takes = (", ".join(sorted(own)) or "none").replace("{", "{{").replace("}", "}}")
        extra = (
            name.replace("{", "{{").replace("}", "}}")
            + f" takes no parameter {{field!r}} (it takes: {takes})"
        )
        raise StrategyError(
            problems_of(exc, prefix="strategy.params", messages={"extra_forbidden": extra})
        ) from None
    return cls(ctx, parsed), ignored

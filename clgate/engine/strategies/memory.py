"""Replay memories hold samples in their stored dtype; ``er`` (class-balanced reservoir) and ``gdumb``."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from clgate.engine.samples import Samples, model_input
from clgate.engine.strategies.base import Strategy, StrategyContext


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


class SampleMemory:
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
        self.memory = SampleMemory(self.params.mem_size, ctx.device)
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
        self.memory = SampleMemory(self.params.mem_size, ctx.device)
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

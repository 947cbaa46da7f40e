"""The model's head (its last per-class linear layer, or a growing head) and the features it reads."""

from __future__ import annotations

import torch
from torch import nn

from clgate.engine.errors import StrategyError
from clgate.engine.models import GrowingLinear


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


class EvalMode:
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

"""Candidate models: built-in architectures, and building the candidate from its files.

Built-ins: ``mlp`` (two hidden layers of 400, the Split-MNIST MLP of De Lange et al.), ``cnn`` (a
small conv net) and ``resnet18-slim`` (the reduced ResNet-18 of Lopez-Paz & Ranzato, GEM 2017: 20
base filters, adaptive pooling so that any image size works); ``torchvision:NAME`` and ``timm:NAME``.

Model files (safetensors, state dicts, TorchScript, ``.pt2``) are judged and loaded by
:mod:`clgate.engine.modelfile`; its public names are re-exported here for existing callers.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from clgate.engine.errors import ModelError
from clgate.engine.modelfile import (
    EXPORT_HINT,
    TORCHSCRIPT_DENIED_OPS,
    TORCHSCRIPT_NAMESPACES,
    ExportedModel,
    check_torchscript_ops,
    file_digest,
    inspect_model_file,
    load_exported,
    load_state_dict_file,
    load_torchscript,
    torchscript_refusal,
)

__all__ = [
    "BUILTIN_ARCHS",
    "EXPORT_HINT",
    "MLP",
    "TORCHSCRIPT_DENIED_OPS",
    "TORCHSCRIPT_NAMESPACES",
    "ExportedModel",
    "GrowingLinear",
    "ResNet18Slim",
    "SmallCNN",
    "apply_weights",
    "build_model",
    "check_output_width",
    "check_torchscript_ops",
    "file_digest",
    "grow_head",
    "inspect_model_file",
    "load_exported",
    "load_model",
    "load_state_dict_file",
    "load_torchscript",
    "make_growing_head",
    "torchscript_refusal",
]

BUILTIN_ARCHS = ("mlp", "cnn", "resnet18-slim")


# ---------------------------------------------------------------------- architectures
class MLP(nn.Module):
    """Flatten → Linear(d, h) → ReLU → Linear(h, h) → ReLU → Linear(h, C) (De Lange et al., Split-MNIST)."""

    def __init__(self, in_features: int, n_classes: int, hidden: int = 400) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """Two conv blocks (32, 64 filters, 3×3) with max-pooling, adaptive pooling, a linear head."""

    def __init__(self, in_channels: int, n_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
        )
        self.head = nn.Linear(64 * 4, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18Slim(nn.Module):
    """Reduced ResNet-18 of Lopez-Paz & Ranzato (GEM, NeurIPS 2017): [2, 2, 2, 2] blocks, ``nf = 20``."""

    def __init__(self, in_channels: int, n_classes: int, nf: int = 20) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, nf, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(nf)
        layers = []
        in_planes = nf
        for planes, stride in ((nf, 1), (2 * nf, 2), (4 * nf, 2), (8 * nf, 2)):
            layers += [_BasicBlock(in_planes, planes, stride), _BasicBlock(planes, planes, 1)]
            in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(8 * nf, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.pool(self.layers(out)).flatten(1)
        return self.linear(out)


def build_model(arch: str, input_shape: tuple[int, ...], n_classes: int, *, hidden: int = 400) -> nn.Module:
    """A freshly initialised built-in model (seed the global RNG first for a reproducible init).

    >>> m = build_model("mlp", (1, 8, 8), 10)
    >>> m(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 10])
    >>> sum(p.numel() for p in m.parameters())
    190410
    """
    if arch == "mlp":
        return MLP(math.prod(input_shape), n_classes, hidden)
    if arch in ("cnn", "resnet18-slim"):
        if len(input_shape) == 2:
            channels, prefix = 1, [nn.Unflatten(1, (1, input_shape[0]))]  # (N, H, W) → (N, 1, H, W)
        elif len(input_shape) == 3:
            channels, prefix = input_shape[0], []
        else:
            raise ModelError(
                f"model.arch: {arch} needs image inputs (N, C, H, W) or (N, H, W); the data has "
                f"samples of shape {input_shape}"
            )
        core = SmallCNN(channels, n_classes) if arch == "cnn" else ResNet18Slim(channels, n_classes)
        return nn.Sequential(*prefix, core) if prefix else core
    if arch.startswith(("torchvision:", "timm:")):
        return _hub_model(arch, input_shape, n_classes)
    raise ModelError(
        f"model.arch: unknown architecture {arch!r} (choose {', '.join(BUILTIN_ARCHS)}, "
        "torchvision:NAME or timm:NAME)"
    )


def _hub_model(arch: str, input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """A torchvision or timm architecture by name, randomly initialised with ``n_classes`` outputs.

    Pretrained weights are never downloaded: give them as ``model.weights`` (safetensors or a state
    dict; the keys are the library's own, unchanged). Grayscale inputs ``(N, 1, H, W)`` or
    ``(N, H, W)`` are repeated to three channels by a forward pre-hook for torchvision models (timm
    builds the first convolution with ``in_chans`` instead).
    """
    library, name = arch.split(":", 1)
    if len(input_shape) not in (2, 3):
        raise ModelError(
            f"model.arch: {arch} needs image inputs (N, C, H, W) or (N, H, W); got samples of shape "
            f"{input_shape}"
        )
    channels = 1 if len(input_shape) == 2 else input_shape[0]
    try:
        hub = importlib.import_module("torchvision.models" if library == "torchvision" else "timm")
    except ImportError as exc:
        raise ModelError(
            f"model.arch: {arch} needs the {library} package (pip install {library}): {exc}"
        ) from None
    except (RuntimeError, OSError) as exc:
        # torchvision (which timm imports) built for another torch: its compiled ops fail to register
        # (e.g. "operator torchvision::nms does not exist") or its libraries fail to load.
        raise ModelError(_mismatched_build_message(arch, exc)) from None
    try:
        if library == "torchvision":
            model = hub.get_model(name, weights=None, num_classes=n_classes)
        else:
            model = hub.create_model(name, pretrained=False, num_classes=n_classes, in_chans=channels)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise ModelError(f"model.arch: {library} cannot build {name!r} ({exc})") from None
    if library == "torchvision" and channels != 3:
        if channels != 1:
            raise ModelError(
                f"model.arch: {arch} takes RGB (3-channel) or grayscale images; the data has "
                f"{channels} channels"
            )
        model.register_forward_pre_hook(_to_rgb)
    elif len(input_shape) == 2:
        model.register_forward_pre_hook(_add_channel)
    return model


def _mismatched_build_message(arch: str, exc: BaseException) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = f"torchvision {version('torchvision')}"
    except PackageNotFoundError:
        installed = "torchvision"
    via = " (timm imports it)" if arch.startswith("timm:") else ""
    return (
        f"model.arch: {arch}: the installed {installed}{via} does not match torch {torch.__version__} "
        f"and cannot be imported ({type(exc).__name__}: {exc}); install the torchvision build made for "
        f"torch {torch.__version__}, from the same index (CPU or CUDA variant) as torch"
    )


def _add_channel(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    x = args[0]
    return (x.unsqueeze(1), *args[1:]) if x.ndim == 3 else args


def _to_rgb(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    x = args[0]
    if x.ndim == 3:
        x = x.unsqueeze(1)
    return (x.expand(-1, 3, -1, -1), *args[1:])


class GrowingLinear(nn.Module):
    """An output layer that grows with the classes: rows for a task's classes are added when it starts.

    Outputs always have ``n_classes`` columns (so class ids keep their meaning); classes without rows
    yet get ``-inf`` logits — the model cannot predict a class it has no output for. Parameters, and so
    the memory-size criterion, grow with the classes seen. New rows are initialised like
    ``nn.Linear``'s (drawn from torch's global RNG, so runs stay seeded).
    """

    classes: torch.Tensor  # a buffer (saved with the state dict): the class id of each output row

    def __init__(self, in_features: int, n_classes: int) -> None:
        super().__init__()
        self.in_features = in_features
        self.n_classes = n_classes
        self.blocks = nn.ModuleList()
        self.register_buffer("classes", torch.zeros(0, dtype=torch.long))

    def grow(self, classes: list[int]) -> None:
        new = [c for c in classes if c not in set(self.classes.tolist())]
        if not new:
            return
        device = self.classes.device
        # the first block's first parameter is its weight (nn.Linear registers weight before bias)
        dtype = next(self.blocks[0].parameters()).dtype if len(self.blocks) else torch.get_default_dtype()
        self.blocks.append(nn.Linear(self.in_features, len(new)).to(device=device, dtype=dtype))
        self.classes = torch.cat([self.classes, torch.tensor(new, dtype=torch.long, device=device)])

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # A checkpoint knows how far the head grew: rebuild the blocks to its shapes before loading.
        classes = state_dict.get(prefix + "classes")
        if isinstance(classes, torch.Tensor):
            sizes: list[int] = []
            while (w := state_dict.get(f"{prefix}blocks.{len(sizes)}.weight")) is not None:
                sizes.append(int(w.shape[0]))
            self.blocks = nn.ModuleList(nn.Linear(self.in_features, n) for n in sizes)
            self.classes = torch.zeros(len(classes), dtype=torch.long, device=self.classes.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_full((x.shape[0], self.n_classes), float("-inf"))
        if not len(self.blocks):
            return out + x.sum() * 0  # keeps the graph connected before the first task (cost counting)
        part = torch.cat([block(x) for block in self.blocks], dim=1)
        return out.index_copy(1, self.classes, part.to(out.dtype))


def make_growing_head(model: nn.Module, n_classes: int) -> nn.Module:
    """Replace the model's last ``nn.Linear`` with ``n_classes`` outputs by a :class:`GrowingLinear`."""
    target = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module.out_features == n_classes:
            target = name
    if target is None:
        raise ModelError(f"model.head: growing needs a final nn.Linear with {n_classes} outputs; none found")
    parent_name, _, attr = target.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    old = getattr(parent, attr)
    setattr(parent, attr, GrowingLinear(old.in_features, n_classes).to(old.weight.device))
    return model


def grow_head(model: nn.Module, classes: list[int]) -> bool:
    """Give the model's growing head rows for ``classes``; False when it has none."""
    heads = [m for m in model.modules() if isinstance(m, GrowingLinear)]
    for head in heads:
        head.grow(classes)
    return bool(heads)


def apply_weights(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:6]
        raise ModelError(f"{source}: weights do not fit the architecture: " + " ".join(lines)) from None


def load_model(
    *,
    arch: str | None,
    weights: Path | None,
    torchscript: Path | None,
    input_shape: tuple[int, ...],
    n_classes: int,
    hidden: int = 400,
) -> tuple[nn.Module, dict[str, Any]]:
    """The candidate model and provenance (``model`` name, ``model_sha256``); checks its output width."""
    info: dict[str, Any] = {}
    if torchscript is not None:
        model = load_torchscript(torchscript)
        info = {
            "model": "torchscript",
            "model_file": str(torchscript),
            "model_sha256": file_digest(torchscript),
        }
    else:
        assert arch is not None
        model = build_model(arch, input_shape, n_classes, hidden=hidden)
        info = {"model": arch}
        if weights is not None:
            apply_weights(model, load_state_dict_file(weights), str(weights))
            info.update(model_file=str(weights), model_sha256=file_digest(weights))
    check_output_width(model, input_shape, n_classes, info.get("model_file") or info["model"])
    return model, info


def check_output_width(model: nn.Module, input_shape: tuple[int, ...], n_classes: int, source: str) -> None:
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model(torch.zeros(2, *input_shape))
    except Exception as exc:
        raise ModelError(f"{source}: the model cannot take inputs of shape {input_shape}: {exc}") from None
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[1] != n_classes:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(
            f"{source}: the model outputs {shape} for a batch of 2; expected (2, {n_classes}) "
            "logits, one per class"
        )

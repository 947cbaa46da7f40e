"""Candidate models: built-in architectures, safetensors / state-dict weights, TorchScript modules.

Built-ins: ``mlp`` (two hidden layers of 400, the Split-MNIST MLP of De Lange et al.), ``cnn`` (a
small conv net) and ``resnet18-slim`` (the reduced ResNet-18 of Lopez-Paz & Ranzato, GEM 2017: 20
base filters, adaptive pooling so that any image size works).

Files are identified by their bytes before anything is loaded (:func:`inspect_model_file`):

- ``safetensors`` — loaded with ``safetensors.torch.load_file`` (no code execution possible);
- ``torchscript`` — a ``torch.jit.save`` zip (``constants.pkl``, ``code/``), loaded with ``torch.jit.load``;
- ``state_dict`` — a ``torch.save`` zip whose pickle only references tensor-rebuilding globals,
  loaded with ``torch.load(weights_only=True)``;
- ``pickled_model`` — a ``torch.save(model)`` zip whose pickle references classes or functions:
  **refused, never unpickled**. The pickle is only scanned with ``pickletools.genops``, which decodes
  opcodes without executing them;
- ``export`` — a ``torch.export.save`` program (``.pt2``), evaluate mode only: loaded with
  ``torch.export.load`` after checking that it holds no pickle (weights stored raw, no pickled
  constants or custom objects, every nested ``torch.save`` payload tensors only) and no compiled code;
- ``pickle`` — a legacy (non-zip) ``torch.save`` file or a bare pickle: only ever read with
  ``torch.load(weights_only=True)`` (torch's restricted unpickler, which builds tensors and containers
  and refuses every other global), so a legacy state dict loads and anything else is refused.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import math
import pickletools
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from clgate.engine.errors import ModelError

BUILTIN_ARCHS = ("mlp", "cnn", "resnet18-slim")

EXPORT_HINT = (
    "clgate never unpickles a whole model (unpickling runs arbitrary code). Export it as TorchScript "
    "(torch.jit.save(torch.jit.script(model), 'model.pt'), then model.torchscript: model.pt) or save its "
    "weights (safetensors.torch.save_file(model.state_dict(), 'model.safetensors'), then model.arch + "
    "model.weights)"
)

# Globals a plain state dict's pickle may reference (what torch.save writes for tensors and dicts).
_SAFE_GLOBAL_PREFIXES = ("torch._utils._rebuild_", "torch._tensor._rebuild_")
_SAFE_GLOBALS = {
    "collections OrderedDict",
    "torch Size",
    "torch device",
    "torch dtype",
    "torch._utils _rebuild_tensor_v2",
    "torch._utils _rebuild_parameter",
    "torch._utils _rebuild_parameter_with_state",
    "builtins set",
}
_STORAGE_NAMES = {
    "FloatStorage",
    "DoubleStorage",
    "HalfStorage",
    "BFloat16Storage",
    "LongStorage",
    "IntStorage",
    "ShortStorage",
    "CharStorage",
    "ByteStorage",
    "BoolStorage",
    "UntypedStorage",
}


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
        dtype = self.blocks[0].weight.dtype if len(self.blocks) else torch.get_default_dtype()
        self.blocks.append(nn.Linear(self.in_features, len(new)).to(device=device, dtype=dtype))
        self.classes = torch.cat([self.classes, torch.tensor(new, dtype=torch.long, device=device)])

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # A checkpoint knows how far the head grew: rebuild the blocks to its shapes before loading.
        classes = state_dict.get(prefix + "classes")
        if isinstance(classes, torch.Tensor):
            sizes = []
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


# ---------------------------------------------------------------------- file inspection
def inspect_model_file(path: str | Path) -> str:
    """What a model file is, from its bytes only: ``safetensors``, ``torchscript``, ``state_dict``,
    ``pickled_model``, ``pickle`` or ``unknown``. Nothing is unpickled.
    """
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(16)
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if head[8:9] == b"{" and 0 < n < 100_000_000:
            return "safetensors"
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
                if any(n == "archive_format" or n.endswith("/archive_format") for n in names):
                    return "export"
                if any(n.endswith("/constants.pkl") for n in names) or any("/code/" in n for n in names):
                    return "torchscript"
                pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
                if not pkl:
                    return "unknown"
                payload = zf.read(pkl[0])
        except (zipfile.BadZipFile, OSError, KeyError):
            return "unknown"
        return "state_dict" if _only_safe_globals(payload) else "pickled_model"
    if head[:1] == b"\x80" or head[:1] in (b"(", b"c", b"]", b"}"):
        return "pickle"
    return "unknown"


def _only_safe_globals(payload: bytes) -> bool:
    """True when the pickle references no global outside what a tensor state dict needs (opcodes only)."""
    strings: list[str] = []
    try:
        for opcode, arg, _pos in pickletools.genops(io.BytesIO(payload)):
            name = opcode.name
            if name in (
                "SHORT_BINUNICODE",
                "BINUNICODE",
                "UNICODE",
                "BINUNICODE8",
                "SHORT_BINSTRING",
                "BINSTRING",
            ):
                strings.append(str(arg))
            elif name in ("GLOBAL", "INST"):
                if not _is_safe_global(*str(arg).split(" ", 1)):
                    return False
            elif name == "STACK_GLOBAL":
                if len(strings) < 2 or not _is_safe_global(strings[-2], strings[-1]):
                    return False
            elif name in ("REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX", "OBJ"):
                continue
    except Exception:  # malformed pickle: not a state dict we accept
        return False
    return True


def _is_safe_global(module: str, name: str) -> bool:
    full = f"{module}.{name}"
    if f"{module} {name}" in _SAFE_GLOBALS or full.startswith(_SAFE_GLOBAL_PREFIXES):
        return True
    return module == "torch" and name in _STORAGE_NAMES


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------- loading
def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors from a safetensors file or a ``torch.save(state_dict)`` file; refuses everything else."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    kind = inspect_model_file(path)
    if kind == "safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as exc:
            raise ModelError(f"{path}: not a readable safetensors file ({exc})") from None
    if kind in ("state_dict", "pickle"):
        # "pickle": a legacy (non-zip) torch.save file or a bare pickle. Its globals are not scanned;
        # torch's restricted weights_only unpickler accepts tensors and containers and refuses the rest.
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # weights_only refuses anything but tensors and containers
            raise ModelError(
                f"{path}: refused: this is a pickled whole model or another object, not a plain state dict "
                f"({type(exc).__name__}). {EXPORT_HINT}"
            ) from None
        if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
            obj = obj["state_dict"]
        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise ModelError(f"{path}: expected a state dict (names → tensors), found {type(obj).__name__}")
        return obj
    if kind == "pickled_model":
        raise ModelError(f"{path}: refused: this is a pickled whole model. {EXPORT_HINT}")
    if kind == "torchscript":
        raise ModelError(
            f"{path}: this is a TorchScript module; give it as model.torchscript, not as weights"
        )
    if kind == "export":
        raise ModelError(
            f"{path}: this is a torch.export program; give it as a checkpoint of clgate evaluate"
        )
    raise ModelError(
        f"{path}: unrecognised model file (expected safetensors, a torch.save state dict or TorchScript)"
    )


# TorchScript operators: a loaded graph may use these namespaces only, and none of the denied operators
# (file, process and library access). A refusal names the operator; nothing denied is ever run.
TORCHSCRIPT_NAMESPACES = frozenset({"aten", "prim"})
TORCHSCRIPT_DENIED_OPS = frozenset({"aten::from_file", "aten::save", "aten::load", "prim::Print"})
_FILE_ARGUMENTS = ("file", "path", "filename", "url", "library")


def _denied_ops() -> frozenset[str]:
    """The fixed denylist plus every registered ``aten``/``prim`` operator that takes a file-like string."""
    denied = set(TORCHSCRIPT_DENIED_OPS)
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.split("::", 1)[0] not in TORCHSCRIPT_NAMESPACES:
            continue
        for arg in schema.arguments:
            if str(arg.type) in ("str", "Optional[str]") and any(
                k in arg.name.lower() for k in _FILE_ARGUMENTS
            ):
                denied.add(schema.name)
    return frozenset(denied)


def torchscript_refusal(op: str) -> str | None:
    """Why operator ``op`` (``namespace::name``) may not run in a candidate model, or ``None``."""
    namespace = op.split("::", 1)[0]
    if namespace not in TORCHSCRIPT_NAMESPACES:
        return (
            f"operator {op} is outside the allowed namespaces ({', '.join(sorted(TORCHSCRIPT_NAMESPACES))})"
        )
    if op in _denied_ops_cache():
        return f"operator {op} accesses files, processes or libraries"
    return None


_DENIED: frozenset[str] | None = None


def _denied_ops_cache() -> frozenset[str]:
    global _DENIED
    if _DENIED is None:
        _DENIED = _denied_ops()
    return _DENIED


def _scan_torchscript_code(path: Path) -> None:
    """Before loading: the archive's serialized code must not name a denied operator (``__setstate__``
    and other methods run while loading, so the graph check alone would come too late for them)."""
    import re

    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if "/code/" not in name or not name.endswith(".py"):
                continue
            text = zf.read(name).decode("utf-8", errors="replace")
            for namespace, op in re.findall(r"\bops\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)", text):
                reason = torchscript_refusal(f"{namespace}::{op}")
                if reason:
                    raise ModelError(f"{path.name}: refused: {reason}")
            for op in re.findall(r"\btorch\.([A-Za-z_]\w*)\s*\(", text):
                if f"aten::{op}" in _denied_ops_cache():
                    raise ModelError(f"{path.name}: refused: {torchscript_refusal(f'aten::{op}')}")


def check_torchscript_ops(module: torch.jit.ScriptModule, source: str) -> None:
    """Refuse a loaded TorchScript module any of whose methods (of any submodule, calls inlined) uses an
    operator outside :data:`TORCHSCRIPT_NAMESPACES` or in the denylist; the error names the operator."""
    seen: set[str] = set()
    for sub in [module, *module.modules()]:
        c = getattr(sub, "_c", None)
        if c is None:
            continue
        for method_name in c._method_names():
            graph = c._get_method(method_name).graph.copy()
            torch._C._jit_pass_inline(graph)
            stack = list(graph.nodes())
            while stack:
                node = stack.pop()
                kind = node.kind()
                if kind not in seen:
                    seen.add(kind)
                    reason = torchscript_refusal(kind)
                    if reason:
                        raise ModelError(
                            f"{source}: refused: {reason} (in {sub.original_name}.{method_name})"
                        )
                for block in node.blocks():
                    stack.extend(block.nodes())


def load_torchscript(path: str | Path) -> torch.nn.Module:
    """A TorchScript module, after its code (before loading) and its graphs (after) pass the operator
    check."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    kind = inspect_model_file(path)
    if kind in ("pickled_model", "pickle"):
        raise ModelError(f"{path}: refused: this is a pickled whole model, not TorchScript. {EXPORT_HINT}")
    if kind in ("safetensors", "state_dict"):
        raise ModelError(
            f"{path}: this holds weights only ({kind}); give model.arch and model.weights instead"
        )
    if kind == "export":
        raise ModelError(
            f"{path}: a torch.export program is evaluated, not retrained: give it as a checkpoint "
            "of clgate evaluate"
        )
    if kind != "torchscript":
        raise ModelError(f"{path}: not a TorchScript file (save one with torch.jit.save)")
    try:
        _scan_torchscript_code(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelError(f"{path}: cannot read TorchScript archive ({exc})") from None
    try:
        with warnings.catch_warnings():  # TorchScript is deprecated upstream but is what candidates ship as
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise ModelError(f"{path}: cannot load TorchScript ({exc})") from None
    check_torchscript_ops(module, path.name)
    return module


class ExportedModel(nn.Module):
    """An exported program's module; its train/eval mode was fixed at export, so mode changes are no-ops."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.program = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.program(x)

    def train(self, mode: bool = True) -> ExportedModel:
        self.training = mode  # the graph is what was exported (export the model in eval mode)
        return self


def _check_export_archive(path: Path) -> None:
    """Refuse a ``.pt2`` that would unpickle anything beyond tensors or load compiled code."""
    from torch.export.pt2_archive.constants import TENSOR_CONSTANT_FILENAME_PREFIX

    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.endswith((".so", ".dll", ".dylib", ".cpp", ".cubin")) or "/aotinductor/" in name:
                raise ModelError(f"{path}: refused: {name} is compiled code (export without AOTInductor)")
            if info.file_size > 1 << 34:
                raise ModelError(f"{path}: {name} is larger than 16 GiB")
            data = zf.read(info)
            if name.endswith("_config.json") and ("weights" in name or "constants" in name):
                try:
                    entries = json.loads(data).get("config", {})
                except (ValueError, AttributeError):
                    raise ModelError(f"{path}: {name} is not a valid configuration") from None
                for fqn, meta in entries.items():
                    if not isinstance(meta, dict) or meta.get("use_pickle", True):
                        raise ModelError(f"{path}: refused: {fqn!r} is stored as a pickle. {EXPORT_HINT}")
                    if "constants" in name and not str(meta.get("path_name", "")).startswith(
                        TENSOR_CONSTANT_FILENAME_PREFIX
                    ):
                        raise ModelError(
                            f"{path}: refused: constant {fqn!r} is a pickled object, not a tensor"
                        )
            elif data[:2] == b"PK":
                try:
                    with zipfile.ZipFile(io.BytesIO(data)) as inner:
                        pkl = [n for n in inner.namelist() if n.endswith("data.pkl")]
                        if any(not _only_safe_globals(inner.read(n)) for n in pkl):
                            raise ModelError(f"{path}: refused: {name} pickles more than tensors")
                except zipfile.BadZipFile:
                    pass
            elif (
                data[:1] == b"\x80"
                and name.endswith((".pkl", ".pt", ".pickle"))
                and not _only_safe_globals(data)
            ):
                raise ModelError(f"{path}: refused: {name} pickles more than tensors")


def load_exported(path: str | Path) -> nn.Module:
    """A ``torch.export`` program (``.pt2``) as a module for evaluation; refused if it holds pickles."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    if inspect_model_file(path) != "export":
        raise ModelError(f"{path}: not a torch.export program (save one with torch.export.save)")
    _check_export_archive(path)
    try:
        program = torch.export.load(str(path))
        return ExportedModel(program.module())
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"{path}: cannot load the exported program ({type(exc).__name__}: {exc})") from None


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

"""Telling model files apart by their bytes; loading weights (safetensors, ``torch.save`` state dicts)."""

from __future__ import annotations

import hashlib
import struct
import zipfile
from pathlib import Path

import torch

from clgate.engine.errors import ModelError
from clgate.engine.modelfile.pickles import STATE_DICT_POLICY, pickle_refusal

EXPORT_HINT = (
    "clgate never unpickles a whole model (unpickling runs arbitrary code). Export it as TorchScript "
    "(torch.jit.save(torch.jit.script(model), 'model.pt'), then model.torchscript: model.pt) or save its "
    "weights (safetensors.torch.save_file(model.state_dict(), 'model.safetensors'), then model.arch + "
    "model.weights)"
)
_MAX_PICKLE = 1 << 29


def inspect_model_file(path: str | Path) -> str:
    """What a model file is, from its bytes only: ``safetensors``, ``torchscript``, ``export``,
    ``state_dict``, ``pickled_model``, ``pickle`` or ``unknown``. Nothing is unpickled.
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
                if not pkl or zf.getinfo(pkl[0]).file_size > _MAX_PICKLE:
                    return "unknown"
                payload = zf.read(pkl[0])
        except (zipfile.BadZipFile, OSError, KeyError, RuntimeError, EOFError):
            return "unknown"
        return "state_dict" if pickle_refusal(payload, STATE_DICT_POLICY) is None else "pickled_model"
    if head[:1] == b"\x80" or head[:1] in (b"(", b"c", b"]", b"}"):
        return "pickle"
    return "unknown"


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
        return _load_torch_state_dict(path)
    raise ModelError(_not_weights_message(path, kind))


def _load_torch_state_dict(path: Path) -> dict[str, torch.Tensor]:
    # "state_dict": its pickle passed the opcode check. "pickle": a legacy (non-zip) torch.save file or a
    # bare pickle, whose globals are not scanned: torch's restricted weights_only unpickler accepts
    # tensors and containers and refuses the rest.
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


def _not_weights_message(path: Path, kind: str) -> str:
    if kind == "pickled_model":
        return f"{path}: refused: this is a pickled whole model. {EXPORT_HINT}"
    if kind == "torchscript":
        return f"{path}: this is a TorchScript module; give it as model.torchscript, not as weights"
    if kind == "export":
        return f"{path}: this is a torch.export program; give it as a checkpoint of clgate evaluate"
    return f"{path}: unrecognised model file (expected safetensors, a torch.save state dict or TorchScript)"

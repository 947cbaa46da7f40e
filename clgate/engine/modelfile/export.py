"""``torch.export`` programs (``.pt2``): judged member by member before ``torch.export.load`` opens them.

What ``torch.export.load`` would run if the file asked it to, and what clgate checks first:

- pickles: the sample inputs, and any weight or constant stored with ``use_pickle``, are ``torch.save``
  zips that torch loads with ``weights_only=True`` and, when that fails, **``weights_only=False``** —
  a full unpickler. Every pickle is judged by its opcodes (:mod:`.pickles`) and must build tensors and
  containers only; a constant that is not a tensor (``custom_obj_*``, loaded by TorchScript's
  unpickler, or ``opaque_obj_*``, loaded by ``pickle.loads``) is refused;
- symbolic expressions: every ``expr_str`` of the JSON members goes to ``sympy.sympify``, which
  evaluates Python. Each must be plain integer arithmetic of symbols (:mod:`.symexpr`);
- guards: ``guards_code`` strings are compiled with ``exec`` when the module is built; honest exports
  carry none, so any is refused;
- graph nodes: every node's target must be an allowed aten operator (:mod:`.ops`);
- compiled code (AOTInductor ``.so`` …) is refused.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.export.pt2_archive.constants import TENSOR_CONSTANT_FILENAME_PREFIX

from clgate.engine.errors import ModelError
from clgate.engine.modelfile.ops import export_target_refusal
from clgate.engine.modelfile.pickles import STATE_DICT_POLICY, pickle_refusal, torch_save_refusal
from clgate.engine.modelfile.symexpr import sym_expr_refusal
from clgate.engine.modelfile.weights import inspect_model_file
from clgate.engine.modelfile.zipcheck import open_checked, read_head, read_member, refuse

# Small members every archive has (format markers), read as text and bounded.
_MARKERS = frozenset(
    {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id", "version"}
)
_COMPILED = (".so", ".dll", ".dylib", ".cpp", ".cubin", ".o", ".a", ".ptx")


def check_export_archive(path: Path) -> None:
    """Raise :class:`ModelError` naming the member and the reason unless every member of the ``.pt2``
    is something ``torch.export.load`` reads without running code from the file."""
    with open_checked(path) as zf:
        infos = zf.infolist()
        raw = _raw_members(zf, infos, path)
        for info in infos:
            rel = info.filename.split("/", 1)[-1]
            if info.is_dir():
                continue
            if rel.endswith(_COMPILED) or "/aotinductor/" in f"/{rel}":
                raise refuse(path, info.filename, "is compiled code (export without AOTInductor)")
            if rel in _MARKERS:
                read_member(zf, info, path, limit=1024)
            elif rel.endswith(".json"):
                _check_json(path, info.filename, read_member(zf, info, path))
            elif rel not in raw:
                _check_pickled(path, info, zf)


def _raw_members(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], path: Path) -> set[str]:
    """Members the weight and constant configurations declare as raw tensor bytes (never unpickled).

    A member that any configuration declares pickled is not raw, whatever another one says."""
    raw: set[str] = set()
    pickled: set[str] = set()
    for info in infos:
        rel = info.filename.split("/", 1)[-1]
        folder = rel.rsplit("/", 1)[0]
        if not (rel.endswith("_config.json") and folder in ("data/weights", "data/constants")):
            continue
        try:
            entries = json.loads(read_member(zf, info, path))["config"]
            items = list(entries.items())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise refuse(path, info.filename, "is not a valid weight/constant configuration") from None
        for fqn, meta in items:
            name = str(meta.get("path_name", "")) if isinstance(meta, dict) else ""
            if not name or "/" in name:
                raise refuse(path, info.filename, f"entry {fqn!r} has no valid path_name")
            if folder == "data/constants" and not name.startswith(TENSOR_CONSTANT_FILENAME_PREFIX):
                # custom_obj_* (TorchScript objects) and opaque_obj_* (plain pickle.loads): never tensors
                raise refuse(path, f"{folder}/{name}", f"constant {fqn!r} is a pickled object, not a tensor")
            (raw if meta.get("use_pickle") is False else pickled).add(f"{folder}/{name}")
    return raw - pickled


def _check_pickled(path: Path, info: zipfile.ZipInfo, zf: zipfile.ZipFile) -> None:
    """A member torch may unpickle: a ``torch.save`` zip or a bare pickle of tensors only."""
    head = read_head(zf, info, path)
    if head[:2] == b"PK":
        reason = torch_save_refusal(read_member(zf, info, path))
    elif head[:1] == b"\x80":
        reason = pickle_refusal(read_member(zf, info, path), STATE_DICT_POLICY)
    else:
        reason = "is neither raw tensor data listed in a configuration nor a torch.save file"
    if reason:
        raise refuse(path, info.filename, reason)


def _check_json(path: Path, member: str, data: bytes) -> None:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise refuse(path, member, "is not valid JSON") from None
    stack: list[Any] = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            _check_json_object(path, member, item)
            stack.extend(item.values())


def _check_json_object(path: Path, member: str, obj: dict[str, Any]) -> None:
    if "expr_str" in obj:
        reason = sym_expr_refusal(obj["expr_str"])
        if reason:
            raise refuse(path, member, f"symbolic expression {str(obj['expr_str'])[:80]!r} {reason}")
    if obj.get("guards_code"):
        raise refuse(path, member, "guards_code holds Python code, which torch would exec")
    if {"target", "inputs", "outputs"} <= obj.keys():
        reason = export_target_refusal(obj["target"])
        if reason:
            raise refuse(path, member, f"graph node {obj.get('name')!r} {reason}")


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


def load_exported(path: str | Path) -> nn.Module:
    """A ``torch.export`` program (``.pt2``) as a module for evaluation, once the whole archive passed
    :func:`check_export_archive`."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    if inspect_model_file(path) != "export":
        raise ModelError(f"{path}: not a torch.export program (save one with torch.export.save)")
    check_export_archive(path)
    try:
        program = torch.export.load(str(path))
        return ExportedModel(program.module())
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"{path}: cannot load the exported program ({type(exc).__name__}: {exc})") from None

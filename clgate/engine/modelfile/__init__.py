"""Model files judged from their content before torch opens them; nothing in a refused file runs.

Files are identified by their bytes before anything is loaded (:func:`inspect_model_file`):

- ``safetensors`` — loaded with ``safetensors.torch.load_file`` (no code execution possible);
- ``state_dict`` — a ``torch.save`` zip whose pickle, judged by its opcodes (:mod:`.pickles`), only
  rebuilds tensors and containers; loaded with ``torch.load(weights_only=True)``;
- ``pickled_model`` — a ``torch.save(model)`` zip whose pickle names classes or functions:
  **refused, never unpickled**;
- ``torchscript`` — a ``torch.jit.save`` zip: every code file parsed and checked against an operator
  allowlist, every pickle judged by its opcodes, then ``torch.jit.load`` (:mod:`.torchscript`);
- ``export`` — a ``torch.export.save`` program (``.pt2``), evaluate mode only: every pickle judged by
  its opcodes, every symbolic expression parsed by clgate's own parser (never sympy), graph nodes
  checked against the allowlist, then ``torch.export.load`` (:mod:`.export`);
- ``pickle`` — a legacy (non-zip) ``torch.save`` file or a bare pickle: only ever read with
  ``torch.load(weights_only=True)`` (torch's restricted unpickler), so a legacy state dict loads and
  anything else is refused.

A refusal is a :class:`~clgate.engine.errors.ModelError` that names the file, the archive member and
the reason (the CLI exits 2, the service answers 4xx).
"""

from __future__ import annotations

from pathlib import Path

from clgate.engine.errors import ModelError
from clgate.engine.modelfile.export import ExportedModel, check_export_archive, load_exported
from clgate.engine.modelfile.pickles import STATE_DICT_POLICY, TORCHSCRIPT_POLICY, pickle_refusal
from clgate.engine.modelfile.symexpr import sym_expr_refusal
from clgate.engine.modelfile.torchscript import (
    TORCHSCRIPT_DENIED_OPS,
    TORCHSCRIPT_NAMESPACES,
    check_torchscript_archive,
    check_torchscript_ops,
    code_refusal,
    load_torchscript,
    torchscript_refusal,
)
from clgate.engine.modelfile.weights import EXPORT_HINT, file_digest, inspect_model_file, load_state_dict_file

__all__ = [
    "EXPORT_HINT",
    "STATE_DICT_POLICY",
    "TORCHSCRIPT_DENIED_OPS",
    "TORCHSCRIPT_NAMESPACES",
    "TORCHSCRIPT_POLICY",
    "ExportedModel",
    "check_export_archive",
    "check_model_file",
    "check_torchscript_archive",
    "check_torchscript_ops",
    "code_refusal",
    "file_digest",
    "inspect_model_file",
    "load_exported",
    "load_state_dict_file",
    "load_torchscript",
    "pickle_refusal",
    "sym_expr_refusal",
    "torchscript_refusal",
]


def check_model_file(path: str) -> str:
    """Judge a model file without loading it (what an upload check calls): its kind, or a
    :class:`~clgate.engine.errors.ModelError` naming the member and the reason."""
    p = Path(path)
    kind = inspect_model_file(p)
    if kind == "export":
        check_export_archive(p)
    elif kind == "torchscript":
        check_torchscript_archive(p)
    elif kind == "pickled_model":
        raise ModelError(f"{p}: refused: this is a pickled whole model. {EXPORT_HINT}")
    return kind

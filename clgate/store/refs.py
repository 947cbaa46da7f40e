"""Artifact references in job specs.

Over the API a spec names files only as ``{"artifact": "sha256:<hex>"}``; :func:`resolve_refs`
replaces each with a local path (a link named after the uploaded file, so that the engine sees the
original extension) and :func:`check_paths` refuses any other path, so that a client cannot make the
service read server files.

>>> spec = {"data": {"kind": "npz", "path": {"artifact": "sha256:" + "ab" * 32}}}
>>> sorted(find_refs(spec))
['abababababababababababababababababababababababababababababababab']
>>> resolve_refs(spec, lambda digest: "/store/" + digest[:4])["data"]["path"]
'/store/abab'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from clgate.store.artifacts import parse_ref

PATH_FIELDS = (("data", "path"), ("model", "weights"), ("model", "torchscript"))


def _is_ref(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"artifact"} and isinstance(node["artifact"], str)


def find_refs(node: Any) -> Iterator[str]:
    """Every artifact digest referenced anywhere in ``node`` (``ValueError`` for a malformed one)."""
    if _is_ref(node):
        yield parse_ref(node["artifact"])
    elif isinstance(node, dict):
        for value in node.values():
            yield from find_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from find_refs(value)


def resolve_refs(node: Any, path_of: Callable[[str], str]) -> Any:
    """A copy of ``node`` with each ``{"artifact": ref}`` replaced by ``path_of(digest)``."""
    if _is_ref(node):
        return path_of(parse_ref(node["artifact"]))
    if isinstance(node, dict):
        return {k: resolve_refs(v, path_of) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve_refs(v, path_of) for v in node]
    return node


def check_paths(spec: dict[str, Any]) -> list[str]:
    """Problems for file fields given as plain paths instead of artifact references."""
    problems = []
    for group, field in PATH_FIELDS:
        section = spec.get(group)
        if isinstance(section, dict) and isinstance(section.get(field), str):
            problems.append(
                f'spec.{group}.{field}: upload the file and refer to it as {{"artifact": "sha256:…"}}'
            )
    for i, checkpoint in enumerate(spec.get("checkpoints") or []):
        value = checkpoint.get("path") if isinstance(checkpoint, dict) else checkpoint
        if isinstance(value, str):
            problems.append(
                f'spec.checkpoints[{i}]: refer to checkpoint files as {{"path": {{"artifact": "sha256:…"}}}}'
            )
    return problems

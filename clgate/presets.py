"""The shipped policies, addressable by name: ``--policy preset:regression-only``.

They are package data (``clgate/examples/policies/*.yaml``), so a pip install reaches them from any
directory; ``clgate policy presets`` lists them with their descriptions.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from clgate.schemas.errors import InputError

PREFIX = "preset:"


class PresetError(InputError):
    """An unknown preset name; the message lists the known ones."""


def _folder() -> Path:
    return Path(str(files("clgate.examples").joinpath("policies")))


def preset_names() -> list[str]:
    """The names of the shipped policies, sorted."""
    return sorted(p.stem for p in _folder().glob("*.yaml"))


def preset_path(name: str) -> Path:
    """The file of the shipped policy ``name``; :class:`PresetError` naming the known ones otherwise."""
    names = preset_names()
    if name not in names:
        raise PresetError(f"--policy: unknown preset {name!r}; the shipped presets are: {', '.join(names)}")
    return _folder() / f"{name}.yaml"


def resolve_policy(given: str) -> Path:
    """``preset:NAME`` → the shipped file; anything else is a path, returned as it is."""
    if given.startswith(PREFIX):
        return preset_path(given.removeprefix(PREFIX).strip())
    return Path(given)


def preset_summary(name: str) -> str:
    """One line about a preset: its description, else the first line of its leading comment."""
    import yaml

    text = preset_path(name).read_text(encoding="utf-8")
    document = yaml.safe_load(text) or {}
    described = " ".join(str(document.get("description") or "").split())
    if described:
        return described
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""

"""Which optional extra each command needs, checked in one place before the command runs.

``pip install clgate`` is the pure core (``metrics``, ``gate``, ``schema``); ``run``, ``evaluate`` and
``demo`` need ``clgate[engine]`` (torch …) and the service commands need ``clgate[service]`` (FastAPI,
Celery, SQLAlchemy …). Without the extra, a command exits 2 with one line that names it, instead of an
``ImportError`` traceback from deep inside.

What an extra contains is read from clgate's own package metadata (the ``extra == "…"`` markers that
pyproject.toml declares), so this module never repeats the dependency lists.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from importlib import metadata
from typing import Any, Literal

import typer

Extra = Literal["engine", "service", "client"]

# Top-level command (or command group) → the extra it needs. Commands not listed need only the base.
EXTRA_OF_COMMAND: dict[str, Extra] = {
    "run": "engine",
    "evaluate": "engine",
    "demo": "engine",
    "import": "engine",
    "serve": "service",
    "worker": "service",
    "keys": "service",
    "db": "service",
    "exporter": "service",
    "audit": "service",
    "remote": "client",
}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_requirements(extra: str) -> list[str]:
    """Distribution names that clgate's metadata lists for ``extra`` (empty when clgate is not installed).

    >>> "torch" in extra_requirements("engine") and "fastapi" in extra_requirements("service")
    True
    """
    try:
        requires = metadata.requires("clgate") or []
    except metadata.PackageNotFoundError:  # a source tree on sys.path without an install: nothing to check
        return []
    names = []
    for requirement in requires:
        requirement_part, _, marker = requirement.partition(";")
        found = _EXTRA_MARKER.search(marker)
        match = _NAME.match(requirement_part.strip())
        wanted = found is not None and found.group(1) == extra and _holds(marker, extra)
        if wanted and match and match.group(0) != "clgate":
            names.append(match.group(0))
    return names


def _holds(marker: str, extra: str) -> bool:
    """Whether a requirement's environment marker holds on this machine for ``extra`` (uvloop, in the
    service extra, is not for Windows: a Windows install without it is complete)."""
    try:
        from packaging.markers import InvalidMarker, Marker
    except ImportError:  # packaging comes with pip and matplotlib; without it, count the requirement
        return True
    try:
        return Marker(marker.strip()).evaluate({"extra": extra})
    except InvalidMarker:
        return True


def is_installed(distribution: str) -> bool:
    """Whether a distribution is installed (by its metadata; nothing is imported)."""
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_requirements(extra: str) -> list[str]:
    """The distributions of ``extra`` that are not installed."""
    return [name for name in extra_requirements(extra) if not is_installed(name)]


def require_extra(extra: Extra, command: str) -> None:
    """Exit 2 with one line naming the extra when any of its distributions is missing."""
    missing = missing_requirements(extra)
    if missing:
        typer.echo(
            f"error: {command} needs the {extra} extra (not installed: {', '.join(missing)}); "
            f"install it with: pip install 'clgate[{extra}]'",
            err=True,
        )
        raise typer.Exit(2)


def _guarded(callback: Callable[..., Any], extra: Extra, command: str) -> Callable[..., Any]:
    """``callback`` that first checks ``extra``; typer still sees the original signature (``__wrapped__``)."""

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        require_extra(extra, command)
        return callback(*args, **kwargs)

    return run


def _guard_group(group: typer.Typer, extra: Extra, prefix: str) -> None:
    for info in group.registered_commands:
        if info.callback is not None:
            name = info.name or info.callback.__name__.replace("_", "-")
            info.callback = _guarded(info.callback, extra, f"{prefix} {name}")
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _guard_group(sub.typer_instance, extra, f"{prefix} {sub.name}")


def guard_commands(app: typer.Typer) -> None:
    """Make every command of ``app`` listed in :data:`EXTRA_OF_COMMAND` check its extra before it runs.

    The check runs after argument parsing, so ``clgate run --help`` still prints the help.
    """
    for info in app.registered_commands:
        if info.callback is None:
            continue
        name = info.name or info.callback.__name__.replace("_", "-")
        extra = EXTRA_OF_COMMAND.get(name)
        if extra is not None:
            info.callback = _guarded(info.callback, extra, f"clgate {name}")
    for group in app.registered_groups:
        extra = EXTRA_OF_COMMAND.get(group.name or "")
        if extra is not None and group.typer_instance is not None:
            _guard_group(group.typer_instance, extra, f"clgate {group.name}")

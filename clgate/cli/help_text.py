"""Help that reads as sentences: no Python type names such as ``<bool>`` or ``<list[Path]>``.

typer shows a type column beside each parameter, built from the annotation. For an on/off flag that
column says ``<bool>`` (the flag takes no value), and for a repeatable option or a variadic argument
it says ``<list[Path]>``. The command classes here keep typer's labels for single values (``<path>``,
``<int>``) and show nothing for flags and the element type for repeated values (``<path>``: the option
is given once per value, as its help says).
"""

from __future__ import annotations

import re
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

_LIST = re.compile(r"<list\[(?P<item>[^\]]+)\]>")


def readable_type(param: Any, ctx: Any) -> str:
    """The type label for ``param``: empty for a flag, ``<path>`` for ``list[Path]``, typer's otherwise.

    >>> from types import SimpleNamespace as Param
    >>> readable_type(Param(is_flag=True), None)
    ''
    >>> readable_type(Param(is_flag=False, display_type=lambda ctx: "<list[Path]>"), None)
    '<path>'
    """
    if getattr(param, "is_flag", False):
        return ""
    label = param.display_type(ctx)
    match = _LIST.fullmatch(label)
    return f"<{match['item'].lower()}>" if match else label


def _readable(params: list[Any]) -> list[Any]:
    for param in params:
        # An option's own metavar stays (an argument's metavar names it; its type column is ours).
        own_metavar = param.metavar is not None and not isinstance(param, TyperArgument)
        if not own_metavar and not getattr(param, "_clgate_readable", False):
            # An instance attribute: typer's help renderers call ``param.display_type_rich(ctx)``.
            param.display_type_rich = lambda ctx, p=param: readable_type(p, ctx)
            param._clgate_readable = True
    return params


class ReadableCommand(TyperCommand):
    """A typer command whose help shows no Python type names."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx))


class ReadableGroup(TyperGroup):
    """A typer command group whose help shows no Python type names."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx))


def make_readable(app: typer.Typer) -> None:
    """Give every command and group registered on ``app`` (recursively) the readable help classes."""
    app.info.cls = ReadableGroup
    for info in app.registered_commands:
        info.cls = ReadableCommand
    for group in app.registered_groups:
        group.cls = ReadableGroup
        if group.typer_instance is not None:
            make_readable(group.typer_instance)

"""The built-in strategies by name, and the ``clgate.strategies`` entry points of plug-ins."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from clgate.engine.errors import StrategyError
from clgate.engine.strategies.base import Finetune, Joint, Strategy, StrategyContext
from clgate.engine.strategies.derpp import DERpp
from clgate.engine.strategies.icarl import ICaRL
from clgate.engine.strategies.memory import ER, GDumb
from clgate.engine.strategies.regularization import EWC, LwF
from clgate.engine.strategies.wa import WA
from clgate.schemas.errors import problems_of

ENTRY_POINT_GROUP = "clgate.strategies"

BUILTIN_STRATEGIES: dict[str, type[Strategy[Any]]] = {
    cls.name: cls for cls in (Finetune, Joint, ER, GDumb, LwF, EWC, WA, ICaRL, DERpp)
}


def available_strategies() -> dict[str, type[Strategy[Any]]]:
    """Built-ins plus every ``clgate.strategies`` entry point (loaded now; a broken plugin is an error)."""
    found = dict(BUILTIN_STRATEGIES)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN_STRATEGIES:
            continue  # the built-ins are registered once, above; a plugin cannot replace one
        try:
            cls = ep.load()
        except Exception as exc:
            raise StrategyError(f"strategy plugin {ep.name!r} ({ep.value}) cannot be loaded: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise StrategyError(
                f"strategy plugin {ep.name!r} ({ep.value}) is not a "
                "clgate.engine.strategies.Strategy subclass"
            )
        found[ep.name] = cls
    return found


def get_strategy(name: str) -> type[Strategy[Any]]:
    if name in BUILTIN_STRATEGIES:
        return BUILTIN_STRATEGIES[name]
    found = available_strategies()
    if name not in found:
        raise StrategyError(
            f"strategy.name: unknown strategy {name!r} (available: {', '.join(sorted(found))})"
        )
    return found[name]


def create_strategy(
    name: str, params: dict[str, Any], ctx: StrategyContext
) -> tuple[Strategy[Any], list[str]]:
    """Build a strategy and validate its hyper-parameters.

    Returns the strategy and the names of ignored parameters: a parameter that this strategy does
    not take but another registered strategy does (so one spec can switch ``strategy.name``) is
    ignored; any other unknown parameter is an error.
    """
    cls = get_strategy(name)
    own = set(cls.Params.model_fields)
    others = {p for c in available_strategies().values() for p in c.Params.model_fields}
    ignored = sorted(k for k in params if k not in own and k in others)
    kept = {k: v for k, v in params.items() if k not in ignored}
    try:
        parsed = cls.Params.model_validate(kept)
    except ValidationError as exc:
        takes = (", ".join(sorted(own)) or "none").replace("{", "{{").replace("}", "}}")
        extra = (
            name.replace("{", "{{").replace("}", "}}")
            + f" takes no parameter {{field!r}} (it takes: {takes})"
        )
        raise StrategyError(
            problems_of(exc, prefix="strategy.params", messages={"extra_forbidden": extra})
        ) from None
    return cls(ctx, parsed), ignored

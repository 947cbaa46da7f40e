"""clgate: validation of class-incremental classifiers on their worst class and worst moment.

The public engine API is imported lazily, so that ``import clgate`` needs no torch (the base install):
``from clgate import Recorder`` loads :mod:`clgate.engine` on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clgate._version import __version__

if TYPE_CHECKING:
    from clgate.engine.evaluator import ContinualEvaluator
    from clgate.engine.recorder import Recorder

_LAZY = {
    "Recorder": "clgate.engine.recorder",
    "ContinualEvaluator": "clgate.engine.evaluator",
}

__all__ = ["ContinualEvaluator", "Recorder", "__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'clgate' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value

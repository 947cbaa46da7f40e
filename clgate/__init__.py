"""clgate: validation of class-incremental classifiers on their worst class and worst moment.

The package root is plain: it holds the version (from :mod:`clgate._version`) and re-exports the two
classes of the public training-loop API, :class:`~clgate.engine.recorder.Recorder` and
:class:`~clgate.engine.evaluator.ContinualEvaluator`. They live in :mod:`clgate.engine`, which needs
torch, so the re-export is lazy: ``import clgate`` needs no torch (the base install), and
``from clgate import Recorder`` loads the engine on first use. These two lazy edges are the root's only
imports of a layer; ``tests/test_layers.py`` names them (``LAZY_EXPORTS``) and holds a module that
imports the root to them too. The package's own modules take the version from :mod:`clgate._version`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from clgate._version import __version__

if TYPE_CHECKING:
    from clgate.engine.evaluator import ContinualEvaluator
    from clgate.engine.recorder import Recorder

# The root's lazy re-exports: attribute → the module that defines it (tests/test_layers.py reads this).
LAZY_EXPORTS = {
    "Recorder": "clgate.engine.recorder",
    "ContinualEvaluator": "clgate.engine.evaluator",
}

__all__ = ["ContinualEvaluator", "Recorder", "__version__"]


def __getattr__(name: str) -> Any:
    module = LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'clgate' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value

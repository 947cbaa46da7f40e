"""Errors of the engine that are the user's input, not a bug: the CLI exits 2 with their message."""

from __future__ import annotations

from clgate.schemas.errors import InputError


class EngineInputError(InputError):
    """Bad input to the engine (data, model file, strategy parameters, checkpoints).

    Raised with a message (``problems`` are its lines) or with ``field: reason`` lines; ``str()`` is
    the message itself, without a heading.
    """


class DataError(EngineInputError):
    """A data set that cannot be used; the message names the file and the problem."""


class ModelError(EngineInputError):
    """A model or checkpoint file that cannot be used (or is refused, like a pickled model)."""


class StrategyError(EngineInputError):
    """An unknown strategy or invalid strategy hyper-parameters."""

"""Errors of the engine that are the user's input, not a bug: the CLI exits 2 with their message."""

from __future__ import annotations


class EngineInputError(ValueError):
    """Bad input to the engine (data, model file, strategy parameters, checkpoints)."""


class DataError(EngineInputError):
    """A data set that cannot be used; the message names the file and the problem."""


class ModelError(EngineInputError):
    """A model or checkpoint file that cannot be used (or is refused, like a pickled model)."""


class StrategyError(EngineInputError):
    """An unknown strategy or invalid strategy hyper-parameters."""

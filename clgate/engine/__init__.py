"""The engine: continual retraining with continual evaluation, writing ``clgate.evaluation-log/v1``.

torch is imported here and in the modules below, never in the pure core (metrics, policy, fmeca).

- :mod:`~clgate.engine.data` — digits, NPZ, image folder, synthetic; validated.
- :mod:`~clgate.engine.scenario` — class order and task split.
- :mod:`~clgate.engine.models` — built-in architectures; building the candidate from its files.
- :mod:`~clgate.engine.modelfile` — model files judged from their content before torch opens them.
- :mod:`~clgate.engine.strategies` — finetune, joint, er, gdumb, lwf, ewc, wa, icarl, derpp;
  plugins by entry point.
- :mod:`~clgate.engine.evaluator` — the evaluation selection; per-class counts on device-resident sets.
- :mod:`~clgate.engine.resources` — parameters, memory bytes, mul-adds.
- :mod:`~clgate.engine.recorder` — :class:`Recorder`: continual evaluation of your own training loop.
- :mod:`~clgate.engine.runner` — :func:`run_job`: a job split across a trust boundary —
  :mod:`~clgate.engine.trusted` (holds the held-out labels, counts, writes the log),
  :mod:`~clgate.engine.staging` (what the child may read), :mod:`~clgate.engine.protocol` (the
  messages), :mod:`~clgate.engine.child` and :mod:`~clgate.engine.training` (the process that runs the
  model: trains and predicts), :mod:`~clgate.engine.schedule` (batches, checkpoints, device).
"""

from clgate.engine.errors import DataError, EngineInputError, ModelError, StrategyError
from clgate.engine.evaluator import ContinualEvaluator
from clgate.engine.recorder import Recorder
from clgate.engine.runner import JobCancelled, Progress, run_job
from clgate.engine.strategies import Strategy, StrategyContext, available_strategies, get_strategy

__all__ = [
    "ContinualEvaluator",
    "DataError",
    "EngineInputError",
    "JobCancelled",
    "ModelError",
    "Progress",
    "Recorder",
    "Strategy",
    "StrategyContext",
    "StrategyError",
    "available_strategies",
    "get_strategy",
    "run_job",
]

"""Continual-learning strategies: a small registry of built-ins plus plugins.

One module per family — :mod:`.base` (the interface and the bounds), :mod:`.memory` (replay memories,
``er``, ``gdumb``), :mod:`.regularization` (``lwf``, ``ewc``), :mod:`.head` (the model's head and
features), :mod:`.icarl`, :mod:`.wa`, :mod:`.derpp` and :mod:`.registry`; every name is importable from
this package.

A strategy sees the run through hooks called by the runner (:mod:`clgate.engine.runner`):

``before_task(k, data)`` → ``task_data(k, data)`` (what the task's updates iterate over) →
per update ``loss(x, y)`` then ``after_step(x, y, first_pass=…)`` → ``end_training(k, data)`` → the
task-end evaluation point → ``after_task(k, data)``. Every evaluation point predicts with
``predict(x)`` (default: the masked logits).

``data`` is the task's training set as :class:`~clgate.engine.samples.Samples`: on the host in its
stored dtype (an image folder is not even decoded), read per batch — :meth:`StrategyContext.read`
gives chosen samples as model input on the device. ``x, y`` of ``loss``/``after_step`` are the
update's batch, on the device. The optimizer is rebuilt at the start of every task.
Built-ins: ``finetune``, ``joint``, ``er``, ``gdumb``, ``lwf``, ``ewc``, ``wa``, ``icarl``, ``derpp``.

Third-party strategies: a subclass of :class:`Strategy` with a ``name`` and a pydantic ``Params``
model, published in the ``clgate.strategies`` entry-point group of its distribution::

    [project.entry-points."clgate.strategies"]
    mystrategy = "mypackage.cl:MyStrategy"

>>> sorted(BUILTIN_STRATEGIES)
['derpp', 'er', 'ewc', 'finetune', 'gdumb', 'icarl', 'joint', 'lwf', 'wa']
>>> get_strategy("er").Params().mem_size
200
"""

from __future__ import annotations

from clgate.engine.strategies.base import Finetune, Joint, NoParams, Strategy, StrategyContext
from clgate.engine.strategies.derpp import DERParams, DERpp
from clgate.engine.strategies.head import (
    EvalMode,
    FeatureTap,
    class_rows,
    find_head,
    head_layers,
    head_norms,
)
from clgate.engine.strategies.icarl import ICaRL, ICaRLParams, herding, nme_scores
from clgate.engine.strategies.memory import (
    ER,
    ERParams,
    GDumb,
    GDumbParams,
    SampleMemory,
    as_stored,
    stored_dtype,
)
from clgate.engine.strategies.registry import (
    BUILTIN_STRATEGIES,
    ENTRY_POINT_GROUP,
    available_strategies,
    create_strategy,
    get_strategy,
)
from clgate.engine.strategies.regularization import EWC, EWCParams, LwF, LwFParams
from clgate.engine.strategies.wa import WA, WAParams, align_weights

__all__ = [
    "BUILTIN_STRATEGIES",
    "ENTRY_POINT_GROUP",
    "ER",
    "EWC",
    "WA",
    "DERParams",
    "DERpp",
    "ERParams",
    "EWCParams",
    "EvalMode",
    "FeatureTap",
    "Finetune",
    "GDumb",
    "GDumbParams",
    "ICaRL",
    "ICaRLParams",
    "Joint",
    "LwF",
    "LwFParams",
    "NoParams",
    "SampleMemory",
    "Strategy",
    "StrategyContext",
    "WAParams",
    "align_weights",
    "as_stored",
    "available_strategies",
    "class_rows",
    "create_strategy",
    "find_head",
    "get_strategy",
    "head_layers",
    "head_norms",
    "herding",
    "nme_scores",
    "stored_dtype",
]

"""An Avalanche plugin: continual evaluation of an Avalanche strategy with :class:`clgate.Recorder`.

Add it to any ``SupervisedTemplate`` strategy (``Naive``, ``Replay`` …): it counts every optimizer
update (``after_update``), lets the recorder evaluate every ``eval_every`` updates with clgate's own
evaluator (no Avalanche evaluation streams, no metric-name parsing, no repeated evaluations of the
same weights around task boundaries), and closes the task after each training experience
(``after_training_exp``), writing the log when ``path`` is given::

    recorder = Recorder(x_test, y_test, tasks=[list(e.classes_in_this_experience) for e in bm.train_stream])
    strategy = Naive(model, optimizer, plugins=[RecorderPlugin(recorder, path="log.json")], ...)
    for experience in bm.train_stream:
        strategy.train(experience)

``avalanche-lib`` pins its own torch, so it is not part of clgate's extras: install it in an
environment of its own (``pip install avalanche-lib clgate[engine]``). Without it this module still
imports (the plugin then derives from ``object``), which is how its hooks are tested here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clgate.engine.recorder import Recorder

try:
    from avalanche.core import SupervisedPlugin as _Base
except ImportError:  # avalanche-lib not installed
    _Base = object
except (RuntimeError, OSError):  # installed, but its torchvision or torch does not load with this torch
    _Base = object


class RecorderPlugin(_Base):  # type: ignore[misc,valid-type,unused-ignore]
    """Feeds a :class:`~clgate.engine.recorder.Recorder` from an Avalanche strategy's hooks.

    Resources are recorded from the experience's dataset size; ``train_bytes(experience)`` gives
    its bytes (default: none recorded, as Avalanche datasets do not know their bytes).
    ``buffer_bytes(strategy)`` gives the replay memory after each experience (default 0).
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        path: str | Path | None = None,
        train_bytes: Any = None,
        buffer_bytes: Any = None,
    ) -> None:
        super().__init__()
        self.recorder = recorder
        self.path = Path(path) if path is not None else None
        self.train_bytes = train_bytes
        self.buffer_bytes = buffer_bytes

    def after_update(self, strategy: Any, *args: Any, **kwargs: Any) -> None:
        mb_y = getattr(strategy, "mb_y", None)
        self.recorder.step(strategy.model, samples=len(mb_y) if mb_y is not None else None)

    def after_training_exp(self, strategy: Any, *args: Any, **kwargs: Any) -> None:
        sizes: dict[str, int] = {}
        if self.train_bytes is not None:
            sizes = {
                "train_size": len(strategy.experience.dataset),
                "train_bytes": int(self.train_bytes(strategy.experience)),
                "buffer_bytes": int(self.buffer_bytes(strategy)) if self.buffer_bytes is not None else 0,
            }
        self.recorder.task_end(strategy.model, **sizes)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.recorder.save(self.path)

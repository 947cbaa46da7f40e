"""The metric registry: one stable id, one definition, one direction.

Policies, reports and Prometheus read this registry instead of guessing what a metric means. Fixed ids
live in :data:`REGISTRY`; the windowed families ``wf{w}`` and ``wp{w}`` (any window ``w ≥ 2``) are
resolved by :func:`metric_info`, and so are the ids of installed plug-ins (:mod:`clgate.metrics.plugins`,
entry-point group ``clgate.metrics``), which come after the built-ins in :func:`metric_ids`.

>>> metric_info("mica").higher_is_better
True
>>> metric_info("wf25").range
(0.0, 1.0)
>>> sorted(metric_info("cl_stability").needs)
['future_tasks', 'resources', 'runs']
"""

from __future__ import annotations

import functools
import math
import operator
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal

from clgate.metrics import plugins, steps
from clgate.metrics.plugins import FAILED, MetricInputs, MetricPlugin, MetricPlugins, PluginOrigin, gauge_name
from clgate.metrics.steps import NEED_REASONS, Outcome

Need = Literal["counts", "future_tasks", "resources", "runs", "baseline", "continual"]
NEEDS: frozenset[str] = frozenset({"counts", "future_tasks", "resources", "runs", "baseline", "continual"})
assert {*NEED_REASONS, "continual"} == NEEDS


@dataclass(frozen=True)
class Gauge:
    """How the service exports a metric's value in the latest decision of each model: the Prometheus
    series name (a fraction ends in ``_ratio``) and its help text."""

    name: str
    help: str


@dataclass(frozen=True)
class MetricInfo:
    """What a metric id means.

    ``needs`` lists what the metric reads beyond the task-end class accuracies. ``counts``,
    ``future_tasks``, ``resources``, ``runs`` and ``baseline`` are hard needs: without them the metric
    is ``null`` and ``MetricsResult.reasons`` says why. ``continual`` marks metrics that read every
    evaluation point (the stability gap lives between task ends); on a log evaluated only at task ends
    they are still computed, from the task ends, and ``MetricsResult.notes`` says so.
    """

    id: str
    name: str
    source: str
    shape: Literal["per_task", "scalar"]
    range: tuple[float, float]
    higher_is_better: bool
    needs: frozenset[str]
    description: str
    compute: Callable[..., Outcome] | None = field(default=None, compare=False, repr=False)
    """The function of :mod:`clgate.metrics.steps` that computes the id (None: only :func:`compute_runs`)."""
    min_tasks: int = 0
    """Fewest finished tasks the value needs; below it the value is null and the reason says so
    (0: the function decides, as per-task values, which are null at the tasks they do not cover)."""
    inputs: tuple[str, ...] = ()
    """Ids this metric is computed from: their needs reach it through their values (weighed by options)."""
    gauge: Gauge | None = None
    """The Prometheus gauge of the metric's value in each model's latest decision (None: not exported)."""
    origin: PluginOrigin | None = None
    """The plug-in (distribution, version, entry point) that provides the id; None for a built-in."""

    @property
    def hard_needs(self) -> frozenset[str]:
        """Needs without which the value is null (all but ``continual``)."""
        return self.needs - {"continual"}

    @property
    def own_needs(self) -> frozenset[str]:
        """Hard needs not inherited from :attr:`inputs`: checked before :attr:`compute` is called."""
        inherited: frozenset[str] = frozenset().union(*(REGISTRY[i].needs for i in self.inputs))
        return self.hard_needs - inherited


def _info(
    id: str,
    name: str,
    source: str,
    shape: Literal["per_task", "scalar"],
    range: tuple[float, float],
    higher_is_better: bool,
    needs: Sequence[str],
    description: str,
    compute: Callable[..., Outcome] | None,
    *,
    min_tasks: int | None = None,
    inputs: Sequence[str] = (),
    gauge: Gauge | None = None,
    origin: PluginOrigin | None = None,
) -> MetricInfo:
    unknown = set(needs) - NEEDS
    assert not unknown, unknown
    if min_tasks is None:
        min_tasks = 1 if shape == "scalar" else 0
    return MetricInfo(
        id,
        name,
        source,
        shape,
        (float(range[0]), float(range[1])),
        higher_is_better,
        frozenset(needs),
        description,
        compute,
        min_tasks,
        tuple(inputs),
        gauge,
        origin,
    )


CL_CRITERIA: tuple[str, ...] = ("a_lifetime", "rem", "bwt_plus", "fwt_lifetime", "ms", "sss", "ce")
"""The criteria of cl_score / cl_stability, in the order of the spec (weights follow this order)."""

KONATE = "Konaté et al., IJCNN 2023"
MICHEL = "Michel et al., MIRU 2023"
DIAZ = "Díaz-Rodríguez et al., 2018"
DELANGE = "De Lange et al., ICLR 2023"

_ENTRIES = [
    _info(
        "acc",
        "Average accuracy",
        f"{KONATE}, eq. 3 (= {MICHEL} AA_k, def. 3.1; {DELANGE} ACC)",
        "per_task",
        (0, 1),
        True,
        [],
        "Mean task accuracy over the tasks seen so far, at each task end.",
        steps.acc,
        gauge=Gauge(
            "clgate_model_accuracy_ratio",
            "Final mean task accuracy of the model's latest decision.",
        ),
    ),
    _info(
        "mica",
        "Minimal incremental class accuracy",
        f"{KONATE}, eq. 5",
        "per_task",
        (0, 1),
        True,
        [],
        "Accuracy of the worst class seen so far, at each task end.",
        steps.mica,
        gauge=Gauge(
            "clgate_model_mica_ratio",
            "Minimal incremental class accuracy (MICA) of the latest decision.",
        ),
    ),
    _info(
        "mica_old",
        "MICA on old classes",
        f"{KONATE}, §III-A",
        "per_task",
        (0, 1),
        True,
        [],
        "Worst class among the classes of earlier tasks, at each task end.",
        steps.mica_old,
    ),
    _info(
        "wamica",
        "Weighted average MICA",
        f"{KONATE}, eqs. 6-7",
        "scalar",
        (0, 1),
        True,
        [],
        "Mean MICA over tasks, penalised by its spread (1 - (max - min)).",
        steps.wamica,
        gauge=Gauge(
            "clgate_model_wamica_ratio",
            "Weighted average MICA (WAMICA) of the latest decision.",
        ),
    ),
    _info(
        "af",
        "Average forgetting",
        f"{MICHEL}, def. 3.2",
        "per_task",
        (-1, 1),
        False,
        [],
        "Mean drop of each old task from its best task-end accuracy.",
        steps.af,
    ),
    _info(
        "raa",
        "Rescaled average accuracy",
        f"{MICHEL}, def. 4.2 / prop. 4.3",
        "per_task",
        (0, 1),
        True,
        [],
        "Average accuracy rescaled by the difficulty (number of classes) of the task.",
        steps.raa,
    ),
    _info(
        "raf",
        "Rescaled average forgetting",
        f"{MICHEL}, defs. 4.1-4.2 / prop. 4.4",
        "per_task",
        (-1, 1),
        False,
        [],
        "Average forgetting relative to a random classifier's, normalised.",
        steps.raf,
    ),
    _info(
        "bwt",
        "Backward transfer",
        f"Lopez-Paz & Ranzato 2017, as in {DIAZ} §3",
        "scalar",
        (-1, 1),
        True,
        [],
        "Mean change of each old task from its own task end to the last task end.",
        steps.bwt,
        min_tasks=2,
    ),
    _info(
        "a_lifetime",
        "Lifetime accuracy",
        f"{DIAZ}, eq. 2",
        "scalar",
        (0, 1),
        True,
        [],
        "Mean of the task-end accuracy matrix on and below the diagonal.",
        steps.a_lifetime,
    ),
    _info(
        "bwt_lifetime",
        "Lifetime backward transfer",
        f"{DIAZ}, eq. 3",
        "scalar",
        (-1, 1),
        True,
        [],
        "Mean change of every old task at every later task end.",
        steps.bwt_lifetime,
        min_tasks=2,
    ),
    _info(
        "rem",
        "Remembering",
        f"{DIAZ}, §3 (REM)",
        "scalar",
        (0, 1),
        True,
        [],
        "1 - |min(bwt_lifetime, 0)|: how much is not forgotten.",
        steps.rem,
        min_tasks=2,
    ),
    _info(
        "bwt_plus",
        "Positive backward transfer",
        f"{DIAZ}, §3 (BWT+)",
        "scalar",
        (0, 1),
        True,
        [],
        "max(bwt_lifetime, 0): improvement of old tasks.",
        steps.bwt_plus,
        min_tasks=2,
    ),
    _info(
        "fwt_lifetime",
        "Lifetime forward transfer",
        f"{DIAZ}, eq. 4",
        "scalar",
        (0, 1),
        True,
        ["future_tasks"],
        "Mean accuracy on future tasks before they are trained.",
        steps.fwt_lifetime,
        min_tasks=2,
    ),
    _info(
        "ms",
        "Model size efficiency",
        f"{DIAZ}, eq. 5",
        "scalar",
        (0, 1),
        True,
        ["resources"],
        "How little the model grows: mean of params_1 / params_i.",
        steps.ms,
    ),
    _info(
        "sss",
        "Samples storage size efficiency",
        f"{DIAZ}, eq. 6",
        "scalar",
        (0, 1),
        True,
        ["resources"],
        "1 - replay memory relative to all training data.",
        steps.sss,
    ),
    _info(
        "ce",
        "Computational efficiency",
        f"{DIAZ}, eq. 7",
        "scalar",
        (0, 1),
        True,
        ["resources"],
        "Mean of ε · ops of one pass / ops spent learning each task.",
        steps.ce,
    ),
    _info(
        "cl_score",
        "CL score",
        f"{DIAZ}, eq. 8",
        "scalar",
        (0, 1),
        True,
        ["resources", "future_tasks"],
        "Weighted sum of the 7 criteria a_lifetime, rem, bwt_plus, fwt_lifetime, ms, sss, ce.",
        partial(steps.cl_score, criteria=CL_CRITERIA),
        min_tasks=0,
        inputs=CL_CRITERIA,
    ),
    _info(
        "cl_stability",
        "CL stability",
        f"{DIAZ}, eq. 9",
        "scalar",
        (0, 1),
        True,
        ["runs", "resources", "future_tasks"],
        "1 - weighted sum of the criteria's standard deviations over runs.",
        None,
        min_tasks=0,
        inputs=CL_CRITERIA,
    ),
    _info(
        "forg",
        "Forgetting",
        f"{DELANGE}, §3.1 (Chaudhry et al. 2018)",
        "per_task",
        (-1, 1),
        False,
        [],
        "Mean drop of each old task from its own task end.",
        steps.forg,
    ),
    _info(
        "min_acc",
        "Minimum accuracy",
        f"{DELANGE}, eq. 2",
        "per_task",
        (0, 1),
        True,
        ["continual"],
        "Mean over old tasks of the lowest accuracy seen after the task was learned.",
        steps.min_acc,
        gauge=Gauge(
            "clgate_model_min_acc_ratio",
            "Worst-moment task accuracy (min-ACC) of the latest decision.",
        ),
    ),
    _info(
        "wc_acc",
        "Worst-case accuracy",
        f"{DELANGE}, eq. 6",
        "scalar",
        (0, 1),
        True,
        ["continual"],
        "Current-task accuracy weighted with min-ACC of the old tasks, at the last task end.",
        steps.wc_acc,
    ),
    _info(
        "min_class_acc",
        "Worst class at its worst moment",
        f"clgate extension ({KONATE} eq. 5 × {DELANGE} eq. 2)",
        "per_task",
        (0, 1),
        True,
        ["continual"],
        "Lowest accuracy any old class reached after its own task ended.",
        steps.min_class_acc,
    ),
    _info(
        "mica_lcb",
        "MICA on Wilson lower bounds",
        f"clgate extension ({KONATE} eq. 5; Wilson 1927)",
        "per_task",
        (0, 1),
        True,
        ["counts"],
        "MICA computed on the lower confidence bounds of class accuracies.",
        steps.mica_lcb,
    ),
    _info(
        "class_regression",
        "Worst class regression",
        "clgate extension",
        "scalar",
        (-1, 1),
        False,
        ["baseline"],
        "Largest drop of a class's final accuracy from the baseline to this run.",
        steps.class_regression,
        min_tasks=0,
        gauge=Gauge(
            "clgate_model_class_regression_ratio",
            (
                "Largest drop of any class's accuracy against the model's baseline (latest decision); "
                "class_name: that class."
            ),
        ),
    ),
]

REGISTRY: dict[str, MetricInfo] = {m.id: m for m in _ENTRIES}
"""Fixed metric ids → :class:`MetricInfo`, in output order. Windowed ids: :func:`metric_info`."""

WINDOWED: dict[str, MetricInfo] = {
    "wf": _info(
        "wf{w}",
        "Windowed forgetting",
        f"{DELANGE}, eqs. 3-4",
        "scalar",
        (0, 1),
        False,
        ["continual"],
        "Largest drop of a task's accuracy within any w consecutive evaluations, mean over tasks.",
        steps.windowed_forgetting,
        min_tasks=0,
    ),
    "wp": _info(
        "wp{w}",
        "Windowed plasticity",
        f"{DELANGE}, eq. 5 and appendix eq. 10",
        "scalar",
        (0, 1),
        True,
        ["continual"],
        "Largest rise of a task's accuracy within any w consecutive evaluations, mean over tasks.",
        steps.windowed_plasticity,
        min_tasks=0,
    ),
}
"""Families of windowed metrics, keyed by prefix; their ``id`` holds the template ``wf{w}``."""

_WINDOWED_ID = re.compile(r"^(wf|wp)([0-9]+)$")


# The longest window (evaluation points) a metric or a policy may name: far beyond any real log, and small
# enough that every computation with it stays in machine integers.
MAX_WINDOW = 1_000_000


def check_window(window: int) -> int:
    """Validate one window length (evaluation points, 2 … :data:`MAX_WINDOW`); returns it as ``int``."""
    try:
        w = operator.index(window)  # int, numpy integers; not floats or bools
    except TypeError:
        w = None
    if w is None or isinstance(window, bool) or w < 2 or w > MAX_WINDOW:
        raise ValueError(
            f"windows: a window counts evaluation points and must be an integer from 2 to "
            f"{MAX_WINDOW} (MAX_WINDOW), got {window!r}"
        )
    return w


def metric_info(metric_id: str) -> MetricInfo:
    """The :class:`MetricInfo` of a fixed id or of a windowed id such as ``wf10`` or ``wp7``.

    Raises :class:`KeyError` with the known ids for anything else.

    >>> metric_info("wp7").id, metric_info("wp7").name
    ('wp7', 'Windowed plasticity (w = 7)')
    >>> metric_info("accuracy")
    Traceback (most recent call last):
    ...
    KeyError: "unknown metric id 'accuracy'; known ids: acc, mica, ..."
    """
    if metric_id in REGISTRY:
        return REGISTRY[metric_id]
    found = plugin_registry().get(metric_id) if isinstance(metric_id, str) else None
    if found is not None:
        return found
    match = _WINDOWED_ID.match(metric_id) if isinstance(metric_id, str) else None
    if (
        match
        and len(match.group(2)) <= len(str(MAX_WINDOW))
        and 2 <= int(match.group(2)) <= MAX_WINDOW
        and not match.group(2).startswith("0")
    ):
        family = WINDOWED[match.group(1)]
        w = int(match.group(2))
        compute = None if family.compute is None else partial(family.compute, window=w)
        return replace(family, id=metric_id, name=f"{family.name} (w = {w})", compute=compute)
    known = ", ".join([*REGISTRY, *plugin_registry()])
    raise KeyError(
        f"unknown metric id {metric_id!r}; known ids: {known}, "
        f"and wf{{w}} / wp{{w}} for a window 2 ≤ w ≤ {MAX_WINDOW} (e.g. wf10)"
    )


def metric_ids(windows: Sequence[int] = (10, 100)) -> list[str]:
    """All ids :func:`~clgate.metrics.compute_metrics` reports for these windows, in output order.

    >>> metric_ids((10,))[-4:]
    ['wf10', 'wp10', 'mica_lcb', 'class_regression']
    """
    ids: list[str] = []
    for metric_id in REGISTRY:
        if metric_id == "mica_lcb":
            for w in windows:
                ids += [f"wf{w}", f"wp{w}"]
        ids.append(metric_id)
    return ids + list(plugin_registry())  # plug-ins last: every built-in is computed before them


# ---------------------------------------------------------------------------------------------- plug-ins
def is_builtin(metric_id: str) -> bool:
    """Whether ``metric_id`` is (or would be) a built-in id: a fixed id, any ``wf…``/``wp…`` followed by
    digits, or ``classes`` (what baseline rules name). A plug-in may not take one.

    >>> is_builtin("mica"), is_builtin("wf07"), is_builtin("cost_weighted_acc")
    (True, True, False)
    """
    return metric_id in REGISTRY or metric_id == "classes" or _WINDOWED_ID.match(metric_id) is not None


def found_plugins() -> MetricPlugins:
    """The installed ``clgate.metrics`` plug-ins (loaded once per process; ``CLGATE_PLUGINS=off``: none)."""
    return plugins.metric_plugins(is_builtin)


def plugin_registry() -> dict[str, MetricInfo]:
    """Plug-in id → :class:`MetricInfo`, in id order; a broken plug-in's id computes to null, its reason
    naming the plug-in and what went wrong."""
    return _plugin_infos(found_plugins())


@functools.cache
def _plugin_infos(found: MetricPlugins) -> dict[str, MetricInfo]:
    infos: dict[str, MetricInfo] = {}
    for metric_id, m in found.metrics.items():
        source = f"plug-in {m.origin.distribution} {m.origin.version}"
        if m.plugin is None:
            reason = f"{FAILED} ({m.origin}): {m.problem}"
            infos[metric_id] = _info(
                metric_id,
                metric_id,
                source,
                "scalar",
                (-math.inf, math.inf),
                True,
                [],
                f"Broken plug-in: {m.problem}",
                partial(_broken, reason=reason),
                min_tasks=0,
                origin=m.origin,
            )
            continue
        p = m.plugin
        lo, hi = (float(v) for v in p.range)
        gauge = None
        if p.gauge:
            gauge = Gauge(
                gauge_name(metric_id, p),
                f"{p.name} (plug-in {m.origin.distribution}) of the latest decision.",
            )
        infos[metric_id] = _info(
            metric_id,
            p.name,
            p.source or source,
            p.shape,
            (lo, hi),
            p.higher_is_better,
            list(p.needs),
            p.description,
            partial(_compute_plugin, plugin=p, origin=m.origin),
            gauge=gauge,
            origin=m.origin,
        )
    return infos


def _broken(ctx: steps.MetricContext, *, reason: str) -> Outcome:
    return Outcome(None, reason=reason)


def _compute_plugin(ctx: steps.MetricContext, *, plugin: MetricPlugin, origin: PluginOrigin) -> Outcome:
    """A plug-in's value from read-only copies of the log's tensors and the built-ins' values so far."""
    inputs = _PLUGIN_INPUTS.get(ctx)
    if inputs is None:  # once per log: every plug-in sees the same inputs (built-ins only, never plug-ins')
        builtins = {k: v for k, v in ctx.metrics.items() if is_builtin(k)}
        inputs = _PLUGIN_INPUTS[ctx] = MetricInputs.from_arrays(
            ctx.a, builtins=builtins, baseline=ctx.baseline
        )
    return plugins.run_plugin(plugin, origin, inputs)


_PLUGIN_INPUTS: weakref.WeakKeyDictionary[steps.MetricContext, MetricInputs] = weakref.WeakKeyDictionary()


def reload_plugins() -> None:
    """Forget the plug-ins found so far (metrics and the caches built from them)."""
    plugins.reload()
    _plugin_infos.cache_clear()

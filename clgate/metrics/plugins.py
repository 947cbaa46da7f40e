"""Plug-in metrics: metric ids that other distributions add through the ``clgate.metrics`` entry points.

A plug-in is an installed distribution that publishes, in its ``pyproject.toml``::

    [project.entry-points."clgate.metrics"]
    cost_weighted_acc = "my_package.metrics:COST_WEIGHTED_ACC"

The entry point's name is the metric id; its object is a :class:`MetricPlugin`: what the id means (as a
built-in's registry entry says it) and a pure function from :class:`MetricInputs` to the value. The
registry (:func:`clgate.metrics.registry.metric_info`) then knows the id, so ``clgate metrics``, the
policies (``{metric: cost_weighted_acc, floor: 0.8}``), multi-seed aggregation, the reports and the
Prometheus gauges treat it like a built-in.

Rules a plug-in cannot break:

- Ids are lowercase identifiers (``[a-z][a-z0-9_]*``, at most 64 characters) that are not a built-in id
  (nor ``wf{w}``/``wp{w}``, nor ``classes``): a colliding id is refused, named.
- The built-ins are computed first and a plug-in sees read-only arrays and copies of the rest: it
  cannot change a built-in's value. A plug-in that cannot be loaded, raises, or returns something that
  is not a value of its declared shape and range (NaN is "undefined"; infinities, wrong lengths,
  wrong types are errors) gives ``null`` with a reason that names the distribution and the entry
  point; a policy rule on that metric is then ``error`` (never a pass), and other rules are unaffected.
- Plug-ins are code the operator installed in the trusted process (the one that holds the held-out
  labels and writes the decision), not the submitted model: install only what you would run there.
  ``CLGATE_PLUGINS=off`` loads none.

>>> inputs = MetricInputs.example()
>>> inputs.R.shape, inputs.finished_tasks
((2, 2), 2)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from clgate.metrics.arrays import LogArrays
from clgate.metrics.steps import Outcome
from clgate.schemas.evaluation_log import EvaluationLog

ENTRY_POINT_GROUP = "clgate.metrics"
PLUGINS_ENV = "CLGATE_PLUGINS"
"""Set to ``off`` to load no plug-in (metrics and rule kinds)."""
PLUGIN_ID = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
PLUGIN_NEEDS = frozenset({"counts", "resources", "baseline"})
FAILED = "plug-in failed"
"""How the reason of a null starts when the plug-in that computes it failed (``clgate metrics`` warns)."""
EVIDENCE_DEPTH = 32
"""How deeply a plug-in's evidence may nest (the built-ins' nests 3 deep; deeper breaks serialization)."""


def plugins_enabled() -> bool:
    """False when ``CLGATE_PLUGINS`` is ``off`` (or ``0``, ``false``, ``no``)."""
    return os.environ.get(PLUGINS_ENV, "").strip().lower() not in ("off", "0", "false", "no")


class PluginAborted(Exception):
    """A plug-in raised a ``BaseException`` that is not an ``Exception`` (``sys.exit`` …): its failure."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}")


def raised(exc: Exception) -> str:
    """``TypeName: message`` of what a plug-in raised (an aborted plug-in's own exception's name)."""
    return str(exc) if isinstance(exc, PluginAborted) else f"{type(exc).__name__}: {exc}"


_STDOUT = threading.RLock()


@contextlib.contextmanager
def plugin_code() -> Iterator[None]:
    """Around every call into a plug-in (import, compute, judge): what it prints goes to stderr (stdout
    carries ``--json`` documents), and a ``SystemExit`` or other ``BaseException`` becomes
    :class:`PluginAborted` — ``sys.exit(0)`` in a plug-in must not end a gate that fails with status 0.
    ``KeyboardInterrupt`` is the operator's and goes through. The lock: ``sys.stdout`` is global."""
    with _STDOUT, contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        except (Exception, KeyboardInterrupt):
            raise
        except BaseException as exc:
            raise PluginAborted(exc) from exc


# ---------------------------------------------------------------------------------------------- origin
@dataclass(frozen=True)
class PluginOrigin:
    """Where a plug-in comes from: its entry point (group, name, ``module:attribute``) and distribution."""

    group: str
    name: str
    value: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}, entry point {self.group}:{self.name} = {self.value}"


def origin_of(ep: EntryPoint) -> PluginOrigin:
    dist = getattr(ep, "dist", None)
    name = str(dist.metadata["Name"]) if dist is not None else "unknown distribution"
    version = str(dist.version) if dist is not None else "?"
    return PluginOrigin(ep.group, ep.name, ep.value, name, version)


def discover(group: str) -> Iterator[tuple[PluginOrigin, Any, str | None]]:
    """``(origin, loaded object or None, problem or None)`` for every entry point of ``group``, each
    distribution's entry point once (a distribution found twice on the path is listed once)."""
    if not plugins_enabled():
        return
    seen: set[tuple[str, str, str]] = set()
    for ep in entry_points(group=group):
        origin = origin_of(ep)
        key = (origin.distribution, origin.name, origin.value)
        if key in seen:
            continue
        seen.add(key)
        try:
            with plugin_code():
                obj = ep.load()
        except Exception as exc:  # a plug-in's import error is its own, named, never ours
            yield origin, None, f"cannot be loaded: {raised(exc)}"
            continue
        yield origin, obj, None


# ---------------------------------------------------------------------------------------------- the API
def _frozen(x: np.ndarray | None) -> Any:
    """A read-only view (no copy: a long log's arrays are hundreds of megabytes); writing raises. Through a
    read-only buffer, so that ``setflags(write=True)`` (the usual answer to the error) raises too: a view
    of the writable array could be made writable, and the class statistics computed after the plug-ins
    read these arrays. A dtype no buffer can carry (datetimes) is copied."""
    if x is None:
        return None
    try:
        y = np.asarray(np.asarray(x).data.toreadonly())
    except (TypeError, ValueError):
        y = np.array(x)
    y.setflags(write=False)
    return y


@dataclass(frozen=True)
class MetricInputs:
    """What a plug-in metric reads: the log's tensors (read-only views), the built-ins' values, the options.

    Shapes (``P`` evaluation points, ``C`` classes, ``K`` tasks, ``F`` finished tasks): ``class_acc``
    ``P × C`` (NaN: not evaluated); ``correct``/``total`` ``P × C`` counts (None when the log gives
    accuracies only); ``task_acc`` ``P × K``; ``R`` ``K × K`` task-end task accuracies (``R[i, j]``: task
    ``j`` after training task ``i``; rows ``≥ F`` NaN); ``r`` ``K × C`` task-end class accuracies;
    ``task_end_points`` the ``F`` point indices of the task ends; ``tasks[k]`` the class ids of task
    ``k``; ``class_task[c]`` the task that introduces class ``c`` (0-based positions everywhere).
    ``builtins``: every built-in id's value for this log (as in ``clgate metrics --json``).
    """

    n_tasks: int
    n_classes: int
    finished_tasks: int
    tasks: tuple[np.ndarray, ...]
    class_names: tuple[str, ...]
    class_task: np.ndarray
    iterations: np.ndarray
    task_end_points: np.ndarray
    class_acc: np.ndarray
    correct: np.ndarray | None
    total: np.ndarray | None
    task_acc: np.ndarray
    R: np.ndarray
    r: np.ndarray
    task_accuracy: str
    resources: Mapping[str, np.ndarray] | None
    meta: Mapping[str, Any]
    builtins: Mapping[str, Any] = field(default_factory=dict)
    baseline: MetricInputs | None = None

    @classmethod
    def from_arrays(
        cls, a: LogArrays, *, builtins: Mapping[str, Any] | None = None, baseline: LogArrays | None = None
    ) -> MetricInputs:
        """Read-only views of ``a``'s tensors (a plug-in cannot change what the built-ins read: writing
        raises ``ValueError``)."""
        F = a.finished_tasks
        return cls(
            n_tasks=a.n_tasks,
            n_classes=a.n_classes,
            finished_tasks=F,
            tasks=tuple(_frozen(t) for t in a.tasks),
            class_names=tuple(a.class_names),
            class_task=_frozen(a.class_task),
            iterations=_frozen(a.iterations),
            task_end_points=_frozen(a.task_end_idx[:F]),
            class_acc=_frozen(a.class_acc),
            correct=_frozen(a.correct),
            total=_frozen(a.total),
            task_acc=_frozen(a.task_acc),
            R=_frozen(a.R),
            r=_frozen(a.r),
            task_accuracy=a.task_accuracy,
            resources=None
            if a.resources is None
            else MappingProxyType({k: _frozen(v) for k, v in a.resources.items()}),
            meta=MappingProxyType(_copy(a.meta)),
            builtins=MappingProxyType(_copy(dict(builtins or {}))),
            baseline=None if baseline is None else cls.from_arrays(baseline),
        )

    @classmethod
    def example(cls) -> MetricInputs:
        """Inputs of a two-task, three-class log (for docstrings and tests of a plug-in)."""
        log = EvaluationLog.parse(
            {
                "tasks": [[0, 1], [2]],
                "class_names": ["ok", "scratch", "dent"],
                "points": [
                    {
                        "iteration": 10,
                        "task": 1,
                        "task_end": True,
                        "correct": [9, 8, 0],
                        "total": [10, 10, 0],
                    },
                    {
                        "iteration": 20,
                        "task": 2,
                        "task_end": True,
                        "correct": [5, 7, 9],
                        "total": [10, 10, 10],
                    },
                ],
            }
        )
        return cls.from_arrays(LogArrays.from_log(log))


def _copy(x: Any) -> Any:
    """A deep copy of plain JSON-like data (dicts, lists, scalars)."""
    if isinstance(x, Mapping):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_copy(v) for v in x]
    return x


def _own(inputs: MetricInputs) -> MetricInputs:
    """``inputs`` with its own copies of ``meta`` and ``builtins`` (the arrays stay shared read-only
    views): the inputs are built once per log, and what one plug-in writes into a nested list or dict
    there no other plug-in may see."""
    return dataclasses.replace(
        inputs,
        meta=MappingProxyType(_copy(inputs.meta)),
        builtins=MappingProxyType(_copy(inputs.builtins)),
        baseline=None if inputs.baseline is None else _own(inputs.baseline),
    )


@dataclass(frozen=True)
class MetricPlugin:
    """A plug-in metric: what it means and how it is computed (the object a ``clgate.metrics`` entry point
    names; the entry point's name must be ``id``).

    ``compute(inputs)`` returns the value — a number (scalar) or a sequence of ``K`` numbers (per task;
    ``None``/NaN where undefined) — or an :class:`~clgate.metrics.steps.Outcome` with evidence and the
    reason of an undefined value. ``needs`` (``counts``, ``resources``, ``baseline``): without them the
    value is null with the built-ins' reason and ``compute`` is not called. ``gauge``: export the final
    value of each model's latest decision to Prometheus as ``clgate_plugin_<id>`` (``_ratio`` when the
    range is within [0, 1]).
    """

    id: str
    name: str
    description: str
    shape: Literal["per_task", "scalar"]
    higher_is_better: bool
    range: tuple[float, float]
    compute: Callable[[MetricInputs], Any]
    needs: Sequence[str] = ()
    source: str = ""
    gauge: bool = False


def check_plugin(plugin: Any, origin: PluginOrigin) -> str | None:
    """Why ``plugin`` (loaded from ``origin``) cannot be registered, or None."""
    if not isinstance(plugin, MetricPlugin):
        return f"is a {type(plugin).__name__}, not a clgate.metrics.plugins.MetricPlugin"
    problems = []
    if plugin.id != origin.name:
        problems.append(f"declares id {plugin.id!r} but its entry point is named {origin.name!r}")
    if plugin.shape not in ("per_task", "scalar"):
        problems.append(f"shape: must be 'per_task' or 'scalar', got {plugin.shape!r}")
    if not _range_ok(plugin.range):
        problems.append(f"range: must be two numbers (low, high) with low < high, got {plugin.range!r}")
    if not isinstance(plugin.higher_is_better, bool):
        problems.append("higher_is_better: must be True or False")
    problems += [
        f"{name}: must be text" for name in ("name", "description", "source") if not _is_text(plugin, name)
    ]
    needs = plugin.needs
    if isinstance(needs, (str, bytes)) or not isinstance(needs, (Sequence, set, frozenset)):
        problems.append(f"needs: must be a list of names (from {sorted(PLUGIN_NEEDS)}), got {needs!r}")
    elif unknown := [n for n in needs if not isinstance(n, str) or n not in PLUGIN_NEEDS]:
        problems.append(f"needs: unknown {unknown!r} (choose from {sorted(PLUGIN_NEEDS)})")
    if not callable(plugin.compute):
        problems.append("compute: is not callable")
    return "; ".join(problems) or None


def _range_ok(bounds: Any) -> bool:
    """Whether ``bounds`` is two real numbers, low < high (text such as ``"1"`` is not a number)."""
    if not isinstance(bounds, (Sequence, np.ndarray)) or isinstance(bounds, (str, bytes)) or len(bounds) != 2:
        return False
    if any(_number(v)[0] is not None or v is None for v in bounds):
        return False
    lo, hi = (float(v) for v in bounds)
    return not (math.isnan(lo) or math.isnan(hi)) and lo < hi


def _is_text(plugin: MetricPlugin, name: str) -> bool:
    return isinstance(getattr(plugin, name), str)


def id_problem(metric_id: str, is_builtin: Callable[[str], bool]) -> str | None:
    """Why ``metric_id`` cannot name a plug-in metric, or None."""
    if not PLUGIN_ID.match(metric_id):
        return f"id {metric_id!r} is not a lowercase identifier ([a-z][a-z0-9_]*, at most 64 characters)"
    if is_builtin(metric_id):
        return f"id {metric_id!r} is a built-in metric id; a plug-in cannot replace or shadow it"
    return None


# ---------------------------------------------------------------------------------------------- running
def run_plugin(plugin: MetricPlugin, origin: PluginOrigin, inputs: MetricInputs) -> Outcome:
    """Call the plug-in and check what it returns; any failure becomes a null with the reason, named."""
    try:
        with plugin_code():
            out = plugin.compute(_own(inputs))
    except Exception as exc:
        return _failed(origin, f"raised {raised(exc)}")
    evidence, reason = None, None
    if isinstance(out, Outcome):
        out, evidence, reason = out.value, out.evidence, out.reason
    problem, value = _checked_value(plugin, inputs.n_tasks, out)
    if problem is None and reason is not None and not isinstance(reason, str):
        problem = f"returned a reason that is a {type(reason).__name__}, not text"
    if problem is None:
        problem, evidence = checked_evidence(evidence, inputs.n_tasks if plugin.shape == "per_task" else None)
    if problem:
        return _failed(origin, problem)
    return Outcome(value, evidence=evidence, reason=reason)


def _plain(x: Any) -> Any:
    """numpy scalars and arrays as Python numbers and lists (for ``json.dumps``)."""
    if isinstance(x, (np.generic, np.ndarray)):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON")


def checked_evidence(evidence: Any, n_tasks: int | None) -> tuple[str | None, Any]:
    """(problem, evidence as plain JSON data): an object (scalar metrics) or a list of ``n_tasks``
    objects or nulls (per-task metrics), as the built-ins' evidence; None is no evidence."""
    if evidence is None:
        return None, None
    try:
        plain = json.loads(json.dumps(evidence, default=_plain, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        return f"returned evidence that is not JSON data ({exc})", None
    if _depth(plain) > EVIDENCE_DEPTH:
        return f"returned evidence nested deeper than {EVIDENCE_DEPTH} levels", None
    if n_tasks is None:
        ok = isinstance(plain, dict)
    else:
        ok = (
            isinstance(plain, list)
            and len(plain) == n_tasks
            and all(e is None or isinstance(e, dict) for e in plain)
        )
    if not ok:
        want = "an object" if n_tasks is None else f"a list of {n_tasks} objects or nulls (one per task)"
        return f"returned evidence that is not {want}", None
    return None, plain


def _depth(x: Any) -> int:
    """How deeply plain JSON data nests (a scalar: 0), without recursion."""
    deepest, todo = 0, [(x, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            todo += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def _failed(origin: PluginOrigin, why: str) -> Outcome:
    return Outcome(None, reason=f"{FAILED} ({origin}): {why}")


def _number(x: Any) -> tuple[str | None, float]:
    if x is None:
        return None, math.nan
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        return f"returned a {type(x).__name__}, not a number", math.nan
    try:
        return None, float(x)
    except OverflowError:  # an int beyond a float's range (10**400)
        return "returned a number too large for a float", math.nan


def _checked_value(plugin: MetricPlugin, n_tasks: int, out: Any) -> tuple[str | None, Any]:
    """(problem, value as numpy): the shape, type, finiteness and range of a plug-in's value."""
    lo, hi = (float(v) for v in plugin.range)
    if plugin.shape == "scalar":
        if isinstance(out, np.ndarray) and out.shape == ():
            out = out.item()
        problem, v = _number(out)
        values = np.array([v])
        if problem:
            return f"{problem} (a scalar metric)", None
    else:
        if isinstance(out, (str, bytes, Mapping)) or not isinstance(out, (Sequence, np.ndarray)):
            return f"returned a {type(out).__name__}, not a sequence of {n_tasks} values (per task)", None
        items = list(np.asarray(out).tolist()) if isinstance(out, np.ndarray) else list(out)
        if len(items) != n_tasks:
            return f"returned {len(items)} values; a per-task metric has one per task ({n_tasks})", None
        parsed = [_number(x) for x in items]
        bad = next(((k, p) for k, (p, _) in enumerate(parsed) if p), None)
        if bad:
            return f"task {bad[0] + 1}: {bad[1]}", None
        values = np.array([v for _, v in parsed], dtype=float)
    if np.isinf(values).any():
        return "returned an infinite value", None
    finite = values[~np.isnan(values)]
    if finite.size and (finite.min() < lo - 1e-12 or finite.max() > hi + 1e-12):
        wrong = next(float(v) for v in finite if v < lo - 1e-12 or v > hi + 1e-12)
        return f"returned {wrong:g}, outside its declared range [{lo:g}, {hi:g}]", None
    return None, (values[0] if plugin.shape == "scalar" else values)


# ---------------------------------------------------------------------------------------------- loading
@dataclass(frozen=True)
class LoadedMetric:
    """A plug-in metric id: the plug-in (None when broken), where it came from, and its problem."""

    id: str
    origin: PluginOrigin
    plugin: MetricPlugin | None
    problem: str | None = None


@dataclass(frozen=True, eq=False)
class MetricPlugins:
    """Every ``clgate.metrics`` entry point found: the ids (usable or broken) and the refused ones."""

    metrics: dict[str, LoadedMetric]
    refused: list[str]
    """Entry points that name no usable id (a built-in's, or not an identifier): one line each."""
    unexported: list[str] = field(default_factory=list)
    """Plug-in metrics whose gauge would take another's Prometheus name: computed, not exported."""

    def warnings(self) -> list[str]:
        """One line per broken, refused or unexported plug-in metric (what the CLI prints as warnings)."""
        broken = [
            f"plug-in metric {m.id!r} ({m.origin}) is broken: {m.problem}"
            for m in self.metrics.values()
            if m.problem
        ]
        return broken + self.refused + self.unexported


def gauge_name(metric_id: str, plugin: MetricPlugin) -> str:
    """The Prometheus name of a plug-in metric's gauge: ``clgate_plugin_<id>``, ``_ratio`` for a value
    within [0, 1].

    >>> gauge_name("x", MetricPlugin("x", "x", "", "scalar", True, (0, 1), lambda i: 0.0, gauge=True))
    'clgate_plugin_x_ratio'
    """
    lo, hi = (float(v) for v in plugin.range)
    return f"clgate_plugin_{metric_id}{'_ratio' if lo >= 0 and hi <= 1 else ''}"


def _unique_gauges(metrics: dict[str, LoadedMetric]) -> list[str]:
    """Turn off the gauge of a plug-in metric whose gauge name an earlier id's already takes (``x`` in
    [0, 1] and ``x_ratio`` both make ``clgate_plugin_x_ratio``; a registry takes one name once): its
    value is still computed, gated and reported. One warning line each."""
    taken: dict[str, str] = {}
    lines: list[str] = []
    for metric_id, m in metrics.items():
        if m.plugin is None or not m.plugin.gauge:
            continue
        name = gauge_name(metric_id, m.plugin)
        if name in taken:
            metrics[metric_id] = dataclasses.replace(m, plugin=dataclasses.replace(m.plugin, gauge=False))
            lines.append(
                f"plug-in metric {metric_id!r} ({m.origin}) is not exported to Prometheus: its gauge "
                f"name {name} is plug-in metric {taken[name]!r}'s"
            )
        else:
            taken[name] = metric_id
    return lines


def load_metric_plugins(is_builtin: Callable[[str], bool]) -> MetricPlugins:
    """Every ``clgate.metrics`` entry point, checked (see the module docstring)."""
    found: dict[str, list[LoadedMetric]] = {}
    refused: list[str] = []
    for origin, obj, problem in discover(ENTRY_POINT_GROUP):
        bad_id = id_problem(origin.name, is_builtin)
        if bad_id:
            refused.append(f"plug-in metric refused ({origin}): {bad_id}")
            continue
        problem = problem or check_plugin(obj, origin)
        found.setdefault(origin.name, []).append(
            LoadedMetric(origin.name, origin, None if problem else obj, problem)
        )
    metrics: dict[str, LoadedMetric] = {}
    for metric_id, entries in sorted(found.items()):
        if len(entries) > 1:
            who = "; ".join(str(e.origin) for e in entries)
            entries = [
                LoadedMetric(
                    metric_id, entries[0].origin, None, f"id {metric_id!r} is declared twice ({who})"
                )
            ]
        metrics[metric_id] = entries[0]
    return MetricPlugins(metrics, refused, _unique_gauges(metrics))


@functools.cache
def _cached(is_builtin: Callable[[str], bool]) -> MetricPlugins:
    return load_metric_plugins(is_builtin)


def metric_plugins(is_builtin: Callable[[str], bool]) -> MetricPlugins:
    """:func:`load_metric_plugins`, once per process (:func:`reload` forgets it)."""
    return _cached(is_builtin)


def reload() -> None:
    """Forget the plug-ins found so far (after installing one in a running process; tests)."""
    _cached.cache_clear()

"""The words every report format shares: status icons, a rule's threshold and evidence in a few
words, percentages, the worst moment, the FMECA note and counts, and what a column of the log is (a class,
or in an NI/NIC log a cell: a class on one task's sample group)."""

from __future__ import annotations

import math
from typing import Any

from clgate.fmt import fmt
from clgate.metrics.registry import plugin_registry
from clgate.schemas.decision import Decision, PooledClassResult, RuleResult
from clgate.schemas.fmeca import FmecaWorksheet

ICON = {"pass": "✅", "warn": "⚠️", "fail": "❌", "error": "⛔"}
VERDICT_ICON = {"PASS": "✅", "WARN": "⚠️", "FAIL": "❌", "ERROR": "⛔"}


# Rule kinds whose value and threshold are counts (modes at a priority, an RPN), not fractions.
COUNT_KINDS = frozenset({"fmeca"})


def column_word(decision: Decision) -> str:
    """What one column of the judged logs is: ``"class"``, or ``"cell"`` in an NI/NIC log (a class on the
    sample group of one task), where the decision also carries each class pooled over its cells.

    >>> from clgate.schemas.decision import Headline
    >>> class D: headline = Headline()
    >>> column_word(D())
    'class'
    """
    return "class" if decision.headline.pooled_classes is None else "cell"


def column_words(decision: Decision) -> dict[str, str]:
    """The words the reports use for a column of the logs: ``column`` and ``columns`` (class/classes or
    cell/cells) and ``gloss``, what a cell is (empty for classes).

    >>> from clgate.schemas.decision import Headline
    >>> class D: headline = Headline(pooled_classes=[])
    >>> column_words(D())["columns"]
    'cells'
    """
    if column_word(decision) == "class":
        return {"column": "class", "columns": "classes", "gloss": ""}
    return {"column": "cell", "columns": "cells", "gloss": " (a class on the sample group of one task)"}


def pooled_counts_text(p: PooledClassResult, runs: int = 1) -> str:
    """A pooled class's counts: ``"13 / 20"``, ``"26 / 40 (2 runs)"``, or ``"—"`` without counts.

    >>> p = PooledClassResult(id=0, name="cat", accuracy=0.65, correct=13, total=20, cells=[])
    >>> pooled_counts_text(p), pooled_counts_text(p, runs=2)
    ('13 / 20', '13 / 20 (2 runs)')
    """
    if p.correct is None or p.total is None:
        return "—"
    return f"{p.correct} / {p.total}" + (f" ({runs} runs)" if runs > 1 else "")


def worst_pooled_text(decision: Decision) -> str | None:
    """NI/NIC logs: the class with the lowest final accuracy pooled over its cells, its counts and its
    worst cell; None for an NC log (or one without a final accuracy).

    >>> from clgate.schemas.decision import Headline
    >>> p = PooledClassResult(id=0, name="cat", accuracy=0.65, correct=13, total=20,
    ...     cells=["cat @ day", "cat @ night"], worst_cell="cat @ night", worst_cell_accuracy=0.6)
    >>> class D: headline = Headline(pooled_classes=[p]); runs = 1
    >>> worst_pooled_text(D())
    "class 'cat' at 0.6500 (13 / 20 over 2 cells; its worst cell 'cat @ night' at 0.6000)"
    """
    pooled = decision.headline.pooled_classes
    if not pooled or pooled[0].accuracy is None:
        return None
    p = pooled[0]
    cell = f"; its worst cell {p.worst_cell!r} at {fmt(p.worst_cell_accuracy)}" if p.worst_cell else ""
    counts = pooled_counts_text(p, decision.runs)
    where = f"{counts} over {len(p.cells)} cell{'s' if len(p.cells) != 1 else ''}"
    return f"class {p.name!r} at {fmt(p.accuracy)} ({where}{cell})"


def threshold_text(r: RuleResult) -> str:
    """``"<= 0"`` for a count (an FMECA rule), ``">= 0.5000"`` for a fraction."""
    if r.threshold is None or r.comparison is None:
        return "—"
    if r.kind in COUNT_KINDS and float(r.threshold).is_integer():
        return f"{r.comparison} {int(r.threshold)}"
    return f"{r.comparison} {fmt(r.threshold)}"


def evidence_text(ev: dict[str, Any], *, column: str = "class") -> str:
    """The evidence in a few words: task, class (``column``: ``"cell"`` in an NI/NIC log, see
    :func:`column_word`), iteration, seed.

    >>> evidence_text({"task": 3, "class_name": "7", "iteration": 450, "seed": 1})
    "task 3, class '7', iteration 450, seed 1"
    >>> evidence_text({"task": 2, "class_name": "cat @ night"}, column="cell")
    "task 2, cell 'cat @ night'"
    """
    parts = []
    if "task" in ev:
        parts.append(f"task {ev['task']}")
    if "class_name" in ev:
        parts.append(f"{column} {ev['class_name']!r}")
    if "iteration" in ev:
        parts.append(f"iteration {ev['iteration']}")
    detail = ev.get("detail")
    if isinstance(detail, dict):
        for key in ("class_name", "class", "iteration"):
            if key in detail and key not in ev and not (key == "class" and "class_name" in detail):
                label = column if key.startswith("class") else key
                parts.append(f"{label} {detail[key]!r}" if label == column else f"{label} {detail[key]}")
    if ev.get("failing_tasks"):
        parts.append("failing tasks " + ",".join(map(str, ev["failing_tasks"])))
    if "seed" in ev:
        parts.append(f"seed {ev['seed']}")
    elif ev.get("over_runs") == "mean":
        parts.append("mean over runs")
    return ", ".join(parts) or "—"


def pct(x: float | None, digits: int = 1) -> str:
    """An error rate (a fraction) as a percentage for people.

    >>> pct(1.0), pct(0.0278), pct(None), pct(0.0)
    ('100.0 %', '2.8 %', '—', '0.0 %')
    """
    if x is None or not math.isfinite(x):
        return "—"
    return f"{100 * x:.{digits}f} %"


def worst_moment_text(decision: Decision) -> str:
    """The worst class (in an NI/NIC log: cell) at its worst moment, named: class, accuracy, iteration, seed.

    >>> from clgate.schemas.decision import Headline, WorstMoment
    >>> class D: headline = Headline(min_class_acc=0.0, worst_moment=WorstMoment(
    ...     class_id=3, class_name="3", task=2, accuracy=0.0, iteration=450, seed=0))
    >>> worst_moment_text(D())
    "class '3' (task 2) at 0.0000, iteration 450, seed 0"
    """
    w = decision.headline.worst_moment
    if w is None:
        return fmt(decision.headline.min_class_acc)
    where = [f"iteration {w.iteration}"] if w.iteration is not None else []
    if w.seed is not None:
        where.append(f"seed {w.seed}")
    tail = ", " + ", ".join(where) if where else ""
    return f"{column_word(decision)} {w.class_name!r} (task {w.task}) at {fmt(w.accuracy)}{tail}"


def fmeca_note(decision: Decision) -> str | None:
    """Why the verdict and the worksheet may seem to disagree: a PASS (or WARN) with High modes, and
    modes that nobody rated. None when there is nothing to explain."""
    sheet = decision.fmeca
    if sheet is None or not sheet.rows:
        return None
    parts = []
    high = [r for r in sheet.rows if r.priority_worst == "High"]
    if high and decision.verdict in ("PASS", "WARN"):
        names = ", ".join(repr(r.class_name) for r in high[:5]) + (" …" if len(high) > 5 else "")
        rules = [r for r in decision.rules if r.kind == "fmeca"]
        if not rules:
            why = (
                "this policy has no FMECA rule: the worksheet ranks the risks for review, "
                "the rules decide the release"
            )
        elif any(r.status == "warn" for r in rules):
            why = (
                "the policy's FMECA rule(s) "
                + ", ".join(repr(r.id) for r in rules if r.status == "warn")
                + (" found them but only warn (severity: warn)")
            )
        else:
            why = (
                "the policy's FMECA rule(s) "
                + ", ".join(f"{r.id!r} ({r.status})" for r in rules)
                + (" judge another occurrence (final/worst) or priority level")
            )
        parts.append(
            f"{decision.verdict} with {len(high)} High-priority failure mode(s) ({names}; worst error after "
            f"learned): {why}."
        )
    if sheet.unrated:
        parts.append(
            f"{sheet.unrated} of {len(sheet.rows)} failure mode(s) are unrated: the policy gives them no "
            "severity (fmeca.severity / fmeca.default_severity), so they have no RPN or priority."
        )
    return " ".join(parts) or None


def fmeca_counts(sheet: FmecaWorksheet) -> str:
    """How many modes at each action priority, for the worst error after learned and the final error.

    >>> from clgate.schemas.fmeca import FmecaWorksheet
    >>> fmeca_counts(FmecaWorksheet(rows=[], matrix=[]))
    'worst error after learned: 0 High · 0 Medium · 0 Low; final error: 0 High · 0 Medium · 0 Low'
    """
    parts = []
    for label, attr in (("worst error after learned", "priority_worst"), ("final error", "priority_final")):
        n = {p: sum(1 for r in sheet.rows if getattr(r, attr) == p) for p in ("High", "Medium", "Low")}
        parts.append(f"{label}: {n['High']} High · {n['Medium']} Medium · {n['Low']} Low")
    return "; ".join(parts) + (f"; {sheet.unrated} unrated" if sheet.unrated else "")


def priority_text(p: str | None) -> str:
    return "unrated" if p is None else p


def plugin_metric_rows(decision: Decision) -> list[tuple[str, float | None]]:
    """``(label, final value)`` of each plug-in metric in the decision's headline; the label is the id
    with its direction (↑ higher is better, ↓ lower) while the plug-in is installed.

    >>> from clgate.schemas.decision import Headline
    >>> class D: headline = Headline(plugins={"not_installed": 0.5})
    >>> plugin_metric_rows(D())
    [('not_installed', 0.5)]
    """
    infos = plugin_registry()
    rows = []
    for metric_id, value in decision.headline.plugins.items():
        info = infos.get(metric_id)
        arrow = "" if info is None or info.origin is None else (" ↑" if info.higher_is_better else " ↓")
        rows.append((f"{metric_id}{arrow}", value))
    return rows

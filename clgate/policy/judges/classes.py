"""Class rules: a floor on the accuracy of named classes (``{classes: ["0", "7"], floor: 0.5}``).

- ``at: final`` judges each class's final accuracy; ``at: min_after_learned`` its lowest accuracy after
  its task ended. Classes of the last task have no evaluation after their task ended: they are skipped
  (listed in the evidence as ``skipped_last_task``). If nothing is left to judge, the rule is an error.
- ``over_runs``: ``worst`` judges each class on its least favourable run, ``mean`` on the mean over runs.
- A partial run's lowest accuracy so far bounds its lowest from above (a violation seen stays one); its
  final accuracy is not the final one and is not judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clgate.fmt import fmt_short
from clgate.policy.judges.base import (
    TOLERANCE,
    IncompleteInput,
    Inputs,
    Judge,
    Judged,
    RuleError,
    describe_missing,
    partial_run,
    seed_of,
    unfinished,
)
from clgate.schemas.metrics import ClassStats, MetricsResult
from clgate.schemas.policy import ClassRule

# (value, class index, run or None for the mean over runs, iteration or None)
_Row = tuple[float, int, int | None, int | None]


def _select_classes(rule: ClassRule, classes: Sequence[ClassStats]) -> list[int]:
    if rule.classes == "*":
        return list(range(len(classes)))
    by_name = {c.name: i for i, c in enumerate(classes)}
    cells_of: dict[str, list[int]] = {}  # NI/NIC: a class's name picks every cell of it
    for i, stats in enumerate(classes):
        if stats.of_class is not None:
            cells_of.setdefault(stats.of_class, []).append(i)
    if cells_of and any(isinstance(ref, int) for ref in rule.classes):
        # a number would be a cell's position, which nobody means: name the class ('3', 'cat') or the cell
        raise RuleError(
            "an NI/NIC log's classes are named, not numbered: write the class's name in quotes "
            "(e.g. '3' or 'cat': every cell of it) or a cell's name (e.g. 'cat @ task 2')"
        )
    picked: list[int] = []
    unknown: list[str] = []
    for ref in rule.classes:
        if isinstance(ref, str) and ref in by_name:
            picked.append(by_name[ref])
        elif isinstance(ref, str) and ref in cells_of:
            picked.extend(cells_of[ref])
        elif isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit()):
            c = int(ref)
            if 0 <= c < len(classes):
                picked.append(c)
            else:
                unknown.append(str(ref))
        else:
            unknown.append(repr(ref))
    if unknown:
        names = ", ".join(c.name for c in classes[:12]) + (" …" if len(classes) > 12 else "")
        raise RuleError(f"unknown class(es) {', '.join(unknown)} (the log's classes: {names})")
    return sorted(set(picked))


def _class_value(stats: ClassStats, at: str, bound: str) -> tuple[float | None, int | None]:
    if at == "final":
        return (stats.final_lcb if bound == "wilson95" else stats.final_accuracy), None
    value = stats.min_after_learned_lcb if bound == "wilson95" else stats.min_after_learned
    return value, stats.min_after_learned_iteration


def _partial_row(rule: ClassRule, runs: Sequence[MetricsResult], c: int, partial: list[int]) -> _Row | None:
    """A class's row when some runs are partial: its lowest accuracy so far is a true upper bound of
    its lowest (a violation seen stays one); a partial run's "final" accuracy is not the final one."""
    vals = [_class_value(r.classes[c], rule.at, rule.bound) for r in runs]
    if rule.at == "final":
        vals = [(None, None) if i in partial else v for i, v in enumerate(vals)]
    have = [(v, i, it) for i, (v, it) in enumerate(vals) if v is not None]
    if not have or rule.over_runs == "mean":
        return None
    value, j, iteration = min(have, key=lambda h: (h[0], h[1]))
    return (value, c, j, iteration)


def _complete_row(rule: ClassRule, runs: Sequence[MetricsResult], c: int) -> _Row:
    """A class's row over complete runs: the worst run (or the mean over runs)."""
    vals = [_class_value(r.classes[c], rule.at, rule.bound) for r in runs]
    stats = runs[0].classes[c]
    if any(v is None for v, _ in vals):
        if rule.bound == "wilson95" and all(
            _class_value(r.classes[c], rule.at, "point")[0] is not None for r in runs
        ):
            raise RuleError(f"class {stats.name!r}: wilson95 needs correct/total counts in the log")
        raise RuleError(
            f"class {stats.name!r}: {rule.at} accuracy is unknown (task {stats.task} not reached)"
        )
    known = [v for v, _ in vals if v is not None]  # all of them: a None raised above
    if rule.over_runs == "mean":
        return (sum(known) / len(known), c, None, None)
    j = min(range(len(known)), key=lambda i: (known[i], i))
    return (known[j], c, j, vals[j][1])


def judge_class(rule: ClassRule, runs: Sequence[MetricsResult], inputs: Inputs) -> Judged:
    """The worst of the named classes, with every class below the floor in the evidence."""
    classes = runs[0].classes
    if not classes:
        raise RuleError("no per-class statistics in the metrics result")
    picked = _select_classes(rule, classes)
    partial = [i for i, r in enumerate(runs) if unfinished(r)]
    rows: list[_Row] = []
    skipped: list[str] = []
    judged_any = False
    for c in picked:
        if rule.at == "min_after_learned" and classes[c].task == runs[0].n_tasks:
            skipped.append(classes[c].name)  # learned last: no point after its task end, nothing to judge
            continue
        judged_any = True
        row = _partial_row(rule, runs, c, partial) if partial else _complete_row(rule, runs, c)
        if row is not None:
            rows.append(row)
    # runs whose values the rule needs but the input does not have
    missing = [partial_run(runs[i], seed_of(runs[i], i), i) for i in partial] if judged_any else []
    if missing and not any(r[0] - rule.floor < -TOLERANCE for r in rows):
        raise IncompleteInput(missing)
    if not rows:
        raise RuleError(
            f"nothing to judge: class(es) {', '.join(map(repr, skipped))} are learned in the last task "
            "and have no evaluation after their task ended"
        )
    return _judged(rule, runs, rows, skipped, missing)


def _judged(
    rule: ClassRule,
    runs: Sequence[MetricsResult],
    rows: list[_Row],
    skipped: list[str],
    missing: list[dict[str, Any]],
) -> Judged:
    """The worst row, its evidence (class, run, the failing classes) and the message."""
    classes = runs[0].classes
    value, c, run, iteration = min(rows, key=lambda r: (r[0], r[1]))
    stats = classes[c]
    margin = value - rule.floor
    failing = [
        {"class": classes[r[1]].id, "name": classes[r[1]].name, "value": r[0]}
        for r in sorted(rows, key=lambda r: (r[0], r[1]))
        if r[0] - rule.floor < -TOLERANCE
    ]
    evidence: dict[str, Any] = {"class": stats.id, "class_name": stats.name, "class_task": stats.task}
    if iteration is not None:
        evidence["iteration"] = iteration
    if run is not None:
        evidence["seed"] = seed_of(runs[run], run)
        evidence["run"] = run
    else:
        evidence["over_runs"] = "mean"
    evidence["classes_judged"] = len(rows)
    if failing:
        evidence["failing_classes"] = failing
    if skipped:
        evidence["skipped_last_task"] = skipped
    if missing:
        evidence["incomplete"] = missing
    what = "final accuracy" if rule.at == "final" else "lowest accuracy after learned"
    bound = " (95 % lower bound)" if rule.bound == "wilson95" else ""
    at_iter = f" at iteration {iteration}" if iteration is not None else ""
    ok = margin >= -TOLERANCE
    column, columns = (
        ("class", "class(es)") if stats.of_class is None else ("cell", "cell(s)")
    )  # NI/NIC: cells
    message = (
        f"worst {column} {stats.name!r}: {what}{bound} {fmt_short(value)}{at_iter} "
        f"({'meets' if ok else 'violates'} >= {rule.floor:g}"
        + (f"; {len(failing)} {columns} below" if failing else "")
        + ")"
        + (f"; input incomplete ({describe_missing(missing)})" if missing else "")
    )
    return Judged(value, rule.floor, ">=", margin, evidence, message)


JUDGE = Judge("class", ClassRule, subject=lambda rule: "class_accuracy", judge=judge_class)

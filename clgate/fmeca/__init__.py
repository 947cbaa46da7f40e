"""FMECA worksheet: each class is a failure mode, "class X misclassified" (in an NI/NIC log each cell,
"class X misclassified in group G").

For each class: severity S and detection D from the policy (per class, with defaults; a class with no
severity and no default is *unrated*: no RPN, no priority, shown as such), occurrence O from the measured
error rate through the occurrence scale (default: made for classifier error rates, see
:data:`clgate.schemas.policy.DEFAULT_OCCURRENCE_SCALE`) — once for the final error and once for the
worst error after the class was learned (the stability gap) — RPN = S × O × D and an action priority
from a table that weighs S first, then O, then D (default: the AIAG-VDA 2019 table). Rows are sorted
by priority, then RPN, worst first; unrated rows last, by worst error. Pure: schema objects in, schema
objects out.

>>> occurrence_rating(0.5), occurrence_rating(0.4999), occurrence_rating(0.1), occurrence_rating(0.0)
(10, 9, 7, 1)
>>> action_priority(9, 4, 1), action_priority(9, 4, 2), action_priority(1, 10, 10)
('Medium', 'High', 'Low')
"""

from __future__ import annotations

from collections.abc import Sequence

from clgate.schemas.fmeca import FmecaRow, FmecaWorksheet
from clgate.schemas.metrics import ClassStats, MetricsResult
from clgate.schemas.policy import PRIORITY_RANK, FmecaConfig, OccurrenceRow, PriorityRow

__all__ = [
    "action_priority",
    "build_worksheet",
    "criticality_matrix",
    "occurrence_rating",
    "unknown_rated_classes",
]

# Error rates computed as 1 - accuracy carry float noise (1 - 0.9 = 0.09999999999999998):
# a rate within this relative tolerance of a scale boundary counts as on the boundary.
_REL_TOL = 1e-9
_DEFAULT = FmecaConfig()


def occurrence_rating(
    error_rate: float | None,
    scale: Sequence[OccurrenceRow] | None = None,
    otherwise: int | None = None,
) -> int:
    """O (1-10) of an error rate: the first row (highest rate first) whose ``at_least`` it reaches.

    Default scale (classifier error rates): ≥ 50 % → 10, ≥ 30 % → 9, ≥ 20 % → 8, ≥ 10 % → 7,
    ≥ 5 % → 6, ≥ 2 % → 5, ≥ 1 % → 4, ≥ 0.5 % → 3, ≥ 0.1 % → 2, below → 1. An unknown rate (the
    class was never evaluated) rates 10: what was not measured cannot be rated as rare.

    >>> [occurrence_rating(r) for r in (0.3, 0.29, 0.05, 0.02, 0.001, 1e-6)]
    [9, 8, 6, 5, 2, 1]
    """
    rows = _DEFAULT.occurrence_scale if scale is None else scale
    below = _DEFAULT.occurrence_otherwise if otherwise is None else otherwise
    if error_rate is None:
        return 10
    for row in rows:
        if error_rate >= row.at_least * (1 - _REL_TOL):
            return row.rating
    return below


def action_priority(
    severity: int, occurrence: int, detection: int, table: Sequence[PriorityRow] | None = None
) -> str:
    """High / Medium / Low: the first table row whose S, O and D ranges all contain the ratings.

    >>> action_priority(10, 2, 6), action_priority(5, 8, 3), action_priority(3, 9, 9)
    ('Medium', 'Medium', 'Medium')
    """
    rows = _DEFAULT.action_priority if table is None else table
    for row in rows:
        if (
            row.severity[0] <= severity <= row.severity[1]
            and row.occurrence[0] <= occurrence <= row.occurrence[1]
            and row.detection[0] <= detection <= row.detection[1]
        ):
            return row.priority
    return "Low"


def _rating(mapping: dict[str, int], default: int | None, stats: ClassStats) -> int | None:
    if stats.name in mapping:
        return mapping[stats.name]
    if stats.of_class is not None and stats.of_class in mapping:  # NI/NIC: a class rates all its cells
        return mapping[stats.of_class]
    return mapping.get(str(stats.id), default)


def unknown_rated_classes(config: FmecaConfig, classes: Sequence[ClassStats]) -> list[str]:
    """Keys of ``severity``/``detection`` that name no class (a typo would silently use the default)."""
    known = (
        {c.name for c in classes} | {str(c.id) for c in classes} | {c.of_class for c in classes if c.of_class}
    )
    problems = []
    for field in ("severity", "detection"):
        for key in getattr(config, field):
            if key not in known:
                problems.append(f"fmeca.{field}: no class named {key!r}")
    return problems


def _errors(stats: ClassStats, bound: str) -> tuple[float | None, float | None, int | None]:
    """(final error, worst error after learned, iteration of the worst) of one class in one run."""
    if bound == "wilson95":
        final_acc, low_acc = stats.final_lcb, stats.min_after_learned_lcb
    else:
        final_acc, low_acc = stats.final_accuracy, stats.min_after_learned
    if final_acc is None:
        final_err = None
    elif bound == "point" and stats.final_total:
        # exact rate from the counts: no 1 - x rounding at the scale's boundaries
        final_err = (stats.final_total - (stats.final_correct or 0)) / stats.final_total
    else:
        final_err = 1.0 - final_acc
    if low_acc is None:
        return final_err, final_err, None
    worst_err = 1.0 - low_acc
    if final_err is not None and final_err > worst_err * (1 + _REL_TOL):
        return final_err, final_err, None  # (only with wilson95: bounds at different points)
    # ties included: the iteration is when the class first reached its lowest accuracy after learned
    return final_err, max(worst_err, final_err or 0.0), stats.min_after_learned_iteration


def _mode(stats: ClassStats) -> str:
    """The failure mode of a class, or of a cell (NI/NIC: a class on one sample group).

    >>> _mode(ClassStats(id=2, name="cat @ night", task=2, final_accuracy=0.6, of_class="cat", group="night"))
    'class cat misclassified in group night'
    """
    if stats.of_class is not None and stats.group is not None:
        return f"class {stats.of_class} misclassified in group {stats.group}"
    return f"class {stats.name} misclassified"


def build_worksheet(runs: Sequence[MetricsResult], config: FmecaConfig | None = None) -> FmecaWorksheet:
    """One row per class from the per-class statistics of one or more runs (seeds).

    With several runs, ``config.over_runs`` picks each class's worst error over the runs (default)
    or the mean error.
    """
    config = config or _DEFAULT
    if not runs:
        raise ValueError("runs: at least one metrics result is needed")
    rows: list[FmecaRow] = []
    for c, stats in enumerate(runs[0].classes):
        per_run = [_errors(r.classes[c], config.bound) for r in runs]
        seeds = [r.meta.get("seed", i) for i, r in enumerate(runs)]
        finals = [e[0] for e in per_run]
        worsts = [e[1] for e in per_run]
        if any(v is None for v in finals):
            final_err = worst_err = None
            worst_iter, seed = None, None
        elif config.over_runs == "mean":
            final_err = sum(finals) / len(finals)  # type: ignore[arg-type]
            worst_err = sum(worsts) / len(worsts)  # type: ignore[arg-type]
            worst_iter, seed = None, None
        else:
            j = max(range(len(runs)), key=lambda i: (worsts[i], -i))
            final_err = max(finals)  # type: ignore[type-var]
            worst_err, worst_iter, seed = worsts[j], per_run[j][2], seeds[j]
        s = _rating(config.severity, config.default_severity, stats)
        d = _rating(config.detection, config.default_detection, stats)
        o_final = occurrence_rating(final_err, config.occurrence_scale, config.occurrence_otherwise)
        o_worst = occurrence_rating(worst_err, config.occurrence_scale, config.occurrence_otherwise)
        ap = config.action_priority
        rows.append(
            FmecaRow(
                class_id=stats.id,
                class_name=stats.name,
                task=stats.task,
                mode=_mode(stats),
                severity=s,
                detection=d,  # type: ignore[arg-type]
                final_error=final_err,
                worst_error=worst_err,
                worst_iteration=worst_iter,
                seed=seed,
                occurrence_final=o_final,
                occurrence_worst=o_worst,
                rpn_final=None if s is None else s * o_final * d,  # type: ignore[operator]
                rpn_worst=None if s is None else s * o_worst * d,  # type: ignore[operator]
                priority_final=None if s is None else action_priority(s, o_final, d, ap),  # type: ignore
                priority_worst=None if s is None else action_priority(s, o_worst, d, ap),  # type: ignore
            )
        )
    rows.sort(key=_row_order)
    return FmecaWorksheet(
        rows=rows,
        matrix=criticality_matrix(rows),
        over_runs=config.over_runs,
        bound=config.bound,
        unrated=sum(not r.rated for r in rows),
    )


def _row_order(row: FmecaRow) -> tuple:
    if not row.rated:  # after every rated row; the largest worst error first (unknown first of all)
        worst = float("inf") if row.worst_error is None else row.worst_error
        return (1, 0, -worst, 0, 0, row.class_id)
    return (
        0,
        -PRIORITY_RANK[row.priority_worst],  # type: ignore[index]
        -row.rpn_worst,  # type: ignore[operator]
        -PRIORITY_RANK[row.priority_final],  # type: ignore[index]
        -row.rpn_final,  # type: ignore[operator]
        row.class_id,
    )


def criticality_matrix(rows: Sequence[FmecaRow]) -> list[list[int]]:
    """10 × 10 counts: ``matrix[10 - S][O - 1]`` rated modes with severity S and worst occurrence O.

    >>> m = criticality_matrix([])
    >>> len(m), len(m[0]), sum(map(sum, m))
    (10, 10, 0)
    """
    matrix = [[0] * 10 for _ in range(10)]
    for row in rows:
        if row.severity is None:
            continue
        matrix[10 - row.severity][row.occurrence_worst - 1] += 1
    return matrix

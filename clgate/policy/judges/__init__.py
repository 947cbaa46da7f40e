"""One judge per policy rule kind, chosen from one table.

A judge takes a validated rule of its kind, the candidate's metrics results (one per run) and the other
:class:`~clgate.policy.judges.base.Inputs` (baseline, FMECA worksheet), and returns a
:class:`~clgate.policy.judges.base.Judged` or raises :class:`~clgate.policy.judges.base.RuleError`.
A new rule kind is a rule model in ``clgate.schemas.policy`` plus a module here with its ``JUDGE``,
listed in :data:`JUDGES` (a test fails when a kind has no judge or a judge no kind).

>>> sorted(JUDGES)
['baseline', 'class', 'fmeca', 'metric']
"""

from __future__ import annotations

from clgate.policy.judges import baseline, classes, fmeca, metric
from clgate.policy.judges.base import (
    TOLERANCE,
    IncompleteInput,
    Inputs,
    Judge,
    Judged,
    RuleError,
    describe_missing,
)

JUDGES: dict[str, Judge] = {j.kind: j for j in (metric.JUDGE, classes.JUDGE, baseline.JUDGE, fmeca.JUDGE)}

__all__ = [
    "JUDGES",
    "TOLERANCE",
    "IncompleteInput",
    "Inputs",
    "Judge",
    "Judged",
    "RuleError",
    "describe_missing",
]

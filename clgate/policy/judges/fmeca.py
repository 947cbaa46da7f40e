"""FMECA rules: gate on the worksheet (``{fmeca: priority, fail_at: High}``, ``{fmeca: rpn, limit: 200}``).

``priority`` fails when any rated mode has at least ``fail_at`` action priority; ``rpn`` when any RPN
is at or over ``limit``. ``occurrence`` picks the rating from the final error or the worst error after
learned. The worksheet is made of final values: every run must be complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clgate.policy.judges.base import Inputs, Judge, Judged, RuleError, require_complete
from clgate.schemas.fmeca import FmecaWorksheet
from clgate.schemas.metrics import MetricsResult
from clgate.schemas.policy import PRIORITY_RANK, FmecaRule


def judge_fmeca(rule: FmecaRule, runs: Sequence[MetricsResult], inputs: Inputs) -> Judged:
    """The modes at or over the rule's priority or RPN limit."""
    if inputs.worksheet is None:
        raise RuleError("no FMECA worksheet (no per-class statistics)")
    require_complete(runs, None)
    return _judge_sheet(rule, inputs.worksheet)


def _judge_sheet(rule: FmecaRule, sheet: FmecaWorksheet) -> Judged:
    occ = rule.occurrence
    rated = [r for r in sheet.rows if r.rated]
    if not rated:
        raise RuleError(
            "no failure mode is rated: give the classes a severity (fmeca.default_severity or fmeca.severity)"
        )
    unrated = f"; {sheet.unrated} mode(s) unrated (no severity)" if sheet.unrated else ""
    if rule.fmeca == "priority":
        floor_rank = PRIORITY_RANK[rule.fail_at]
        hits = [r for r in rated if PRIORITY_RANK[getattr(r, f"priority_{occ}")] >= floor_rank]
        evidence: dict[str, Any] = {
            "modes": [
                {
                    "class": r.class_id,
                    "class_name": r.class_name,
                    "S": r.severity,
                    "O": getattr(r, f"occurrence_{occ}"),
                    "D": r.detection,
                    "rpn": getattr(r, f"rpn_{occ}"),
                    "priority": getattr(r, f"priority_{occ}"),
                }
                for r in hits[:10]
            ],
            "occurrence": occ,
        }
        if hits:
            evidence["class"] = hits[0].class_id
            evidence["class_name"] = hits[0].class_name
        level = rule.fail_at + (" or High" if rule.fail_at == "Medium" else "")
        names = ", ".join(repr(r.class_name) for r in hits[:5]) + (" …" if len(hits) > 5 else "")
        message = (
            f"{len(hits)} failure mode(s) with {level} action priority ({occ} occurrence)"
            + (f": {names}" if hits else "")
            + unrated
        )
        return Judged(float(len(hits)), 0.0, "<=", float(-len(hits)), evidence, message)
    assert rule.limit is not None
    top = max(rated, key=lambda r: (getattr(r, f"rpn_{occ}"), -r.class_id))
    rpn = getattr(top, f"rpn_{occ}")
    over = [r for r in rated if getattr(r, f"rpn_{occ}") >= rule.limit]
    evidence = {
        "class": top.class_id,
        "class_name": top.class_name,
        "S": top.severity,
        "O": getattr(top, f"occurrence_{occ}"),
        "D": top.detection,
        "occurrence": occ,
        "modes_at_or_over_limit": len(over),
    }
    message = (
        f"highest RPN {rpn} (class {top.class_name!r}, "
        f"S={top.severity} O={evidence['O']} D={top.detection}); "
        f"{len(over)} mode(s) at or over {rule.limit}{unrated}"
    )
    # RPN is an integer: "RPN < limit" is "RPN <= limit - 1", so the margin is >= 0 exactly when it passes
    return Judged(float(rpn), float(rule.limit), "<", float(rule.limit - 1 - rpn), evidence, message)


JUDGE = Judge("fmeca", FmecaRule, subject=lambda rule: f"fmeca.{rule.fmeca}", judge=judge_fmeca)

"""Evaluating a policy: rule results from metrics results, then the verdict.

Pure: metrics results and schema objects in, a :class:`~clgate.schemas.decision.Decision` out. Semantics:

- A ``floor`` passes when ``value >= floor``, a ``ceiling`` when ``value <= ceiling``; equality passes
  (within ``TOLERANCE``, so that 0.8 computed as 0.7999999999999999 still meets a floor of 0.8).
- ``at``: ``final`` judges the last task; ``task:N`` task N (1-based); ``worst`` the least favourable
  task; ``all`` the same value, with every failing task listed in the evidence. Tasks where a metric
  is undefined by its definition in every run (forgetting at task 1) are skipped by ``worst``/``all``.
- Per-class ``min_after_learned``: classes of the last task have no evaluation after their task ended;
  they are skipped (listed in the evidence as ``skipped_last_task``). If nothing is left to judge, the
  rule is an error.
- ``over_runs``: ``worst`` takes, per task, the least favourable run (its seed is the evidence);
  ``mean`` the mean over runs. A value missing in any run cannot be averaged: the rule is an error.
- A rule whose value cannot be computed (metric null, class unknown, no baseline …) has status
  ``error``; any error makes the verdict ERROR. Never a silent pass.
- Completeness: a task a run did not finish, a scalar of a partial run, a value null in one run but
  not in another are *missing*, never skipped. The values that exist are judged (a per-task value of
  a partial run is what the complete run has at that task; a partial run's lowest class accuracy so
  far bounds its lowest from above): a violation among them is a violation (``fail``). Otherwise the
  rule is ``error`` ("incomplete input", evidence ``incomplete`` names each run and task missing).
  Rules on final values of partial runs (``class at: final``, baselines, FMECA, ``over_runs: mean``)
  cannot be bounded: ``error``.
- Two-sided rules judge the floor on the run lowest and the ceiling on the run highest; the evidence
  names both (``floor``/``ceiling``: value, task, seed, run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clgate.fmeca import build_worksheet, unknown_rated_classes
from clgate.fmt import fmt_short
from clgate.metrics import metric_info
from clgate.policy.model import LCB_METRICS
from clgate.schemas.decision import RuleResult, RuleStatus
from clgate.schemas.fmeca import FmecaWorksheet
from clgate.schemas.metrics import ClassStats, MetricsResult
from clgate.schemas.policy import (
    PRIORITY_RANK,
    BaselineRule,
    ClassRule,
    FmecaRule,
    MetricRule,
    parse_at,
    rule_label,
)
from clgate.schemas.vocab import Verdict

TOLERANCE = 1e-9


class RuleError(Exception):
    """The rule cannot be evaluated on these inputs (becomes a status-``error`` result)."""


@dataclass
class _Judged:
    value: float
    threshold: float
    comparison: str
    margin: float
    evidence: dict[str, Any]
    message: str


def _seed(result: MetricsResult, run: int) -> Any:
    return result.meta.get("seed", run)


def _task_evidence(result: MetricsResult, metric: str, pos: int | None) -> Any:
    ev = result.evidence.get(metric)
    if ev is None:
        return None
    if isinstance(ev, list):
        if pos is not None and 0 <= pos < len(ev):
            return ev[pos]
        return None
    return ev


def _metric_series(result: MetricsResult, metric: str) -> tuple[list[float | None], bool]:
    """(values, per_task): a scalar becomes a one-element series."""
    if metric not in result.metrics:
        raise RuleError(f"metric {metric!r} was not computed")
    v = result.metrics[metric]
    if isinstance(v, list):
        return list(v), True
    return [v], False


def _null_reason(results: Sequence[MetricsResult], metric: str) -> str:
    for r in results:
        if metric in r.reasons:
            return r.reasons[metric]
    return "undefined for these inputs"


def _combine(
    runs: Sequence[MetricsResult], metric: str, over_runs: str, lower_is_worse: bool
) -> tuple[list[float | None], list[int | None], bool]:
    """Per task: the value over runs and the run that gave it (None for mean)."""
    series = [_metric_series(r, metric) for r in runs]
    per_task = series[0][1]
    width = max(len(s[0]) for s in series)
    values: list[float | None] = []
    which: list[int | None] = []
    for k in range(width):
        col = [s[0][k] if k < len(s[0]) else None for s in series]
        if any(v is None for v in col):
            values.append(None)
            which.append(None)
        elif over_runs == "mean":
            values.append(sum(col) / len(col))  # type: ignore[arg-type]
            which.append(None)
        else:
            pick = min if lower_is_worse else max
            j = pick(range(len(col)), key=lambda i: (col[i], i) if lower_is_worse else (col[i], -i))
            values.append(col[j])
            which.append(j)
    return values, which, per_task


class IncompleteInput(RuleError):
    """The rule needs a task or a seed the input does not have, and what it has does not violate it."""

    def __init__(self, missing: list[dict[str, Any]], note: str = "") -> None:
        self.missing = missing
        super().__init__("incomplete input: " + describe_missing(missing) + (f" ({note})" if note else ""))


def _unfinished(result: MetricsResult) -> bool:
    return result.finished_tasks < result.n_tasks


def describe_missing(missing: Sequence[dict[str, Any]]) -> str:
    """``seed 1: task(s) 3, 4, 5 not finished; seed 2: task 2 null`` (one clause per run)."""
    parts = []
    for m in missing:
        tasks = m.get("tasks")
        where = "" if not tasks else " task(s) " + ", ".join(map(str, tasks))
        parts.append(f"seed {m['seed']}:{where} {m['why']}")
    return "; ".join(parts)


@dataclass
class _Cells:
    """One metric's values, run × task (one column for a scalar), and the cells the input lacks."""

    grid: list[list[float | None]]
    per_task: bool
    missing: dict[tuple[int, int], str]  # (run, task index) → why

    def missing_at(self, runs: Sequence[MetricsResult], tasks: Sequence[int]) -> list[dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for (i, k), why in sorted(self.missing.items()):
            if k not in tasks:
                continue
            entry = out.setdefault(i, {"seed": _seed(runs[i], i), "run": i, "tasks": [], "why": why})
            if self.per_task:
                entry["tasks"].append(k + 1)
        return list(out.values())


def _cells(runs: Sequence[MetricsResult], metric: str) -> _Cells:
    """The values of ``metric`` in every run, with the missing cells marked.

    A cell is missing when its run did not finish that task (for a scalar: did not finish at all —
    a scalar of a partial run does not describe the whole run, whatever value it carries), or when it
    is null while another run has a value there. A cell null in every finished run is undefined by the
    metric's definition (forgetting at task 1) and is not missing.
    """
    series = [_metric_series(r, metric) for r in runs]
    per_task = series[0][1]
    width = max(len(s[0]) for s in series)
    grid: list[list[float | None]] = []
    missing: dict[tuple[int, int], str] = {}
    for i, (r, (vals, _)) in enumerate(zip(runs, series, strict=True)):
        row = [vals[k] if k < len(vals) else None for k in range(width)]
        for k in range(width):
            if _unfinished(r) and (not per_task or k >= r.finished_tasks):
                row[k] = None
                missing[(i, k)] = (
                    "not finished"
                    if per_task
                    else (f"partial run ({r.finished_tasks} of {r.n_tasks} tasks finished)")
                )
        grid.append(row)
    for k in range(width):
        if any(g[k] is not None for g in grid):
            for i, g in enumerate(grid):
                if g[k] is None and (i, k) not in missing:
                    missing[(i, k)] = f"{metric} null ({_null_reason([runs[i]], metric)})"
    return _Cells(grid, per_task, missing)


def _judge_side(
    rule: MetricRule, runs: Sequence[MetricsResult], cells: _Cells, source: str, side: str
) -> tuple[tuple[float, int, float, int | None] | None, list[int]]:
    """The least favourable (margin, task index, value, run) of one side of a rule, and the task
    indices the rule needs that the input lacks. Only cells that exist are judged: they are true values
    (a per-task value of a partial run is what the complete run would have had at that task)."""
    threshold = rule.floor if side == "floor" else rule.ceiling
    assert threshold is not None
    at, n = parse_at(rule.at)
    width = len(cells.grid[0])
    if not cells.per_task:
        candidates = [0]
    elif at == "final":
        candidates = [width - 1]
    elif at == "task":
        assert n is not None
        if n > width:
            raise RuleError(f"task:{n} does not exist (the log has {width} tasks)")
        candidates = [n - 1]
    else:
        candidates = list(range(width))
    judged: list[tuple[float, int, float, int | None]] = []
    lacking: list[int] = []
    for k in candidates:
        col = [(v, i) for i, g in enumerate(cells.grid) if (v := g[k]) is not None]
        gaps = any((i, k) in cells.missing for i in range(len(runs)))
        if gaps:
            lacking.append(k)
        if not col:
            if gaps or at in ("worst", "all"):
                continue  # missing (reported) or undefined by definition at this task (skipped)
            where = f" at task {k + 1}" if cells.per_task else ""
            raise RuleError(f"{source} is null{where}: {_null_reason(runs, source)}")
        if rule.over_runs == "mean":
            if gaps:
                continue  # an average over the runs that have a value is not the mean over runs
            v, run = sum(c[0] for c in col) / len(col), None
        else:
            pick = min if side == "floor" else max
            v, run = pick(col, key=lambda c: (c[0], c[1]) if side == "floor" else (c[0], -c[1]))
        margin = (v - threshold) if side == "floor" else (threshold - v)
        judged.append((margin, k, v, run))
    if not judged and not lacking:
        raise RuleError(f"{source} is null at every task: {_null_reason(runs, source)}")
    worst = min(judged, key=lambda j: (j[0], j[1])) if judged else None
    return worst, lacking


def _judge_metric(rule: MetricRule, runs: Sequence[MetricsResult]) -> _Judged:
    metric = rule.metric
    source = metric
    if rule.bound == "wilson95":
        source = LCB_METRICS[metric]
    cells = _cells(runs, source)
    at, _ = parse_at(rule.at)
    sides = [s for s in ("floor", "ceiling") if getattr(rule, s) is not None]
    results: dict[str, tuple[float, int, float, int | None]] = {}
    lacking: set[int] = set()
    failing_tasks: set[int] = set()
    for side in sides:
        worst, lack = _judge_side(rule, runs, cells, source, side)
        lacking.update(lack)
        if worst is not None:
            results[side] = worst
        if at == "all":
            failing_tasks.update(_failing_tasks(rule, cells, side))
    violated = any(r[0] < -TOLERANCE for r in results.values())
    missing = cells.missing_at(runs, sorted(lacking))
    if missing and not violated:
        raise IncompleteInput(missing, "cannot average over runs" if rule.over_runs == "mean" else "")
    side, (m, k, v, run) = min(results.items(), key=lambda s: (s[1][0], s[1][1]))
    thr = rule.floor if side == "floor" else rule.ceiling
    cmp = ">=" if side == "floor" else "<="
    evidence: dict[str, Any] = {}
    if cells.per_task:
        evidence["task"] = k + 1
    if run is not None:
        evidence["seed"] = _seed(runs[run], run)
        evidence["run"] = run
        detail = _task_evidence(runs[run], source, k if cells.per_task else None)
    else:
        evidence["over_runs"] = "mean"
        detail = _task_evidence(runs[0], source, k if cells.per_task else None) if len(runs) == 1 else None
    if detail is not None:
        evidence["detail"] = detail
    if len(sides) == 2:  # two-sided: each side judged on its own worst run, both named
        for s, (sm, sk, sv, srun) in results.items():
            evidence[s] = {
                "value": sv,
                "margin": sm,
                "threshold": getattr(rule, s),
                **({"task": sk + 1} if cells.per_task else {}),
                **(
                    {"seed": _seed(runs[srun], srun), "run": srun}
                    if srun is not None
                    else {"over_runs": "mean"}
                ),
            }
    if at == "all":
        evidence["failing_tasks"] = sorted(failing_tasks)
    if missing:
        evidence["incomplete"] = missing
    where = f" at task {k + 1}" if cells.per_task else ""
    seed = f", seed {evidence['seed']}" if "seed" in evidence and len(runs) > 1 else ""
    ok = m >= -TOLERANCE
    message = f"{source}{where}{seed} = {fmt_short(v)} ({'meets' if ok else 'violates'} {cmp} {thr:g})"
    if missing:
        message += f"; input incomplete ({describe_missing(missing)})"
    assert thr is not None
    return _Judged(v, thr, cmp, m, evidence, message)


def _failing_tasks(rule: MetricRule, cells: _Cells, side: str) -> list[int]:
    """1-based tasks where some run (or the mean over runs) violates ``side``."""
    threshold = rule.floor if side == "floor" else rule.ceiling
    out = []
    for k in range(len(cells.grid[0])):
        col = [v for g in cells.grid if (v := g[k]) is not None]
        if not col:
            continue
        if rule.over_runs == "mean":
            if any((i, k) in cells.missing for i in range(len(cells.grid))):
                continue
            vals = [sum(col) / len(col)]
        else:
            vals = col
        for v in vals:
            margin = (v - threshold) if side == "floor" else (threshold - v)  # type: ignore[operator]
            if margin < -TOLERANCE:
                out.append(k + 1)
                break
    return out


def _select_classes(rule: ClassRule, classes: Sequence[ClassStats]) -> list[int]:
    if rule.classes == "*":
        return list(range(len(classes)))
    by_name = {c.name: i for i, c in enumerate(classes)}
    picked: list[int] = []
    unknown: list[str] = []
    for ref in rule.classes:
        if isinstance(ref, str) and ref in by_name:
            picked.append(by_name[ref])
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


def _judge_class(rule: ClassRule, runs: Sequence[MetricsResult]) -> _Judged:
    classes = runs[0].classes
    if not classes:
        raise RuleError("no per-class statistics in the metrics result")
    picked = _select_classes(rule, classes)
    n_tasks = runs[0].n_tasks
    partial = [i for i, r in enumerate(runs) if _unfinished(r)]
    rows: list[tuple[float, int, int | None, int | None]] = []  # (value, class, run, iteration)
    skipped = []
    lacking: set[int] = set()  # runs whose values the rule needs but the input does not have
    for c in picked:
        vals = [_class_value(r.classes[c], rule.at, rule.bound) for r in runs]
        stats = classes[c]
        if rule.at == "min_after_learned" and stats.task == n_tasks:
            skipped.append(stats.name)  # learned last: no point after its task end, nothing to judge
            continue
        if partial:
            # a partial run's lowest accuracy so far is a true upper bound of its lowest (a violation seen
            # stays one); its "final" accuracy is not the final one: not judged
            lacking.update(partial)
            if rule.at == "final":
                vals = [(None, None) if i in partial else v for i, v in enumerate(vals)]
            have = [(v, i, it) for i, (v, it) in enumerate(vals) if v is not None]
            if not have or rule.over_runs == "mean":
                continue
            value, j, iteration = min(have, key=lambda h: (h[0], h[1]))
            rows.append((value, c, j, iteration))
            continue
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
            rows.append((sum(known) / len(known), c, None, None))
        else:
            j = min(range(len(known)), key=lambda i: (known[i], i))
            rows.append((known[j], c, j, vals[j][1]))
    missing = [
        {
            "seed": _seed(runs[i], i),
            "run": i,
            "why": f"partial run ({runs[i].finished_tasks} of {runs[i].n_tasks} tasks finished)",
        }
        for i in sorted(lacking)
    ]
    if missing and not any(r[0] - rule.floor < -TOLERANCE for r in rows):
        raise IncompleteInput(missing)
    if not rows:
        raise RuleError(
            f"nothing to judge: class(es) {', '.join(map(repr, skipped))} are learned in the last task "
            "and have no evaluation after their task ended"
        )
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
        evidence["seed"] = _seed(runs[run], run)
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
    message = (
        f"worst class {stats.name!r}: {what}{bound} {fmt_short(value)}{at_iter} "
        f"({'meets' if ok else 'violates'} >= {rule.floor:g}"
        + (f"; {len(failing)} class(es) below" if failing else "")
        + ")"
        + (f"; input incomplete ({describe_missing(missing)})" if missing else "")
    )
    return _Judged(value, rule.floor, ">=", margin, evidence, message)


def _judge_baseline(
    rule: BaselineRule,
    runs: Sequence[MetricsResult],
    base: MetricsResult | None,
    higher_is_better: bool | None,
) -> _Judged:
    if base is None:
        raise RuleError("needs a baseline run (--baseline LOG)")
    b_val: float | None
    c_val: float | None
    if rule.baseline == "classes":
        if len(base.classes) != len(runs[0].classes) or any(
            a.name != b.name for a, b in zip(base.classes, runs[0].classes, strict=True)
        ):
            raise RuleError("the baseline's classes differ from the candidate's")
        drops = []
        for c, b in enumerate(base.classes):
            finals = [r.classes[c].final_accuracy for r in runs]
            cand = [v for v in finals if v is not None]
            if b.final_accuracy is None or len(cand) < len(finals):
                raise RuleError(f"class {b.name!r}: final accuracy unknown in the candidate or the baseline")
            run: int | None
            if rule.over_runs == "mean":
                v, run = sum(cand) / len(cand), None
            else:
                run = min(range(len(cand)), key=lambda i: (cand[i], i))
                v = cand[run]
            drop = b.final_accuracy - v
            if rule.relative:
                if b.final_accuracy == 0:
                    drop = 0.0  # nothing to lose: a class at 0 in the baseline cannot drop
                else:
                    drop = drop / b.final_accuracy
            drops.append((drop, c, run, b.final_accuracy, v))
        drop, c, run, b_val, c_val = max(drops, key=lambda d: (d[0], -d[1]))
        name = base.classes[c].name
        evidence: dict[str, Any] = {"class": c, "class_name": name, "baseline": b_val, "candidate": c_val}
        subject = f"class {name!r}"
    else:
        metric = rule.baseline
        assert higher_is_better is not None
        at, n = parse_at(rule.at)
        vals, which, per_task = _combine(runs, metric, rule.over_runs, higher_is_better)
        bvals, _, _ = _combine([base], metric, "mean", higher_is_better)
        k = (len(vals) - 1) if at == "final" or not per_task else (n or 1) - 1
        if k >= len(vals):
            raise RuleError(f"task:{n} does not exist (the log has {len(vals)} tasks)")
        c_val, b_val = vals[k], bvals[k] if k < len(bvals) else None
        if c_val is None or b_val is None:
            who = "candidate" if c_val is None else "baseline"
            reason = _null_reason(runs if c_val is None else [base], metric)
            raise RuleError(f"{metric} is null in the {who}: {reason}")
        drop = (b_val - c_val) if higher_is_better else (c_val - b_val)
        if rule.relative:
            if b_val == 0:
                raise RuleError(f"relative drop undefined: the baseline's {metric} is 0")
            drop = drop / abs(b_val)
        run = which[k]
        evidence = {"baseline": b_val, "candidate": c_val}
        if per_task:
            evidence["task"] = k + 1
        subject = metric + (f" at task {k + 1}" if per_task and at != "final" else "")
    if run is not None:
        evidence["seed"] = _seed(runs[run], run)
        evidence["run"] = run
    margin = rule.max_drop - drop
    unit = " (relative)" if rule.relative else ""
    ok = margin >= -TOLERANCE
    message = (
        f"{subject}: {fmt_short(evidence['baseline'])} → {fmt_short(evidence['candidate'])}, "
        f"drop {fmt_short(drop)}{unit} "
        f"({'within' if ok else 'exceeds'} {rule.max_drop:g})"
    )
    return _Judged(drop, rule.max_drop, "<=", margin, evidence, message)


def _require_complete(runs: Sequence[MetricsResult], baseline: MetricsResult | None) -> None:
    """Baseline and FMECA rules judge final values: every run (and the baseline) must be complete."""
    missing = [
        {
            "seed": _seed(r, i),
            "run": i,
            "why": f"partial run ({r.finished_tasks} of {r.n_tasks} tasks finished)",
        }
        for i, r in enumerate(runs)
        if _unfinished(r)
    ]
    if baseline is not None and _unfinished(baseline):
        missing.append(
            {
                "seed": f"{_seed(baseline, 0)} (baseline)",
                "run": None,
                "why": f"partial run ({baseline.finished_tasks} of {baseline.n_tasks} tasks finished)",
            }
        )
    if missing:
        raise IncompleteInput(missing)


def _judge_fmeca(rule: FmecaRule, sheet: FmecaWorksheet) -> _Judged:
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
        return _Judged(float(len(hits)), 0.0, "<=", float(-len(hits)), evidence, message)
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
    return _Judged(float(rpn), float(rule.limit), "<", float(rule.limit - 1 - rpn), evidence, message)


def evaluate_rules(
    policy: Any,
    runs: Sequence[MetricsResult],
    *,
    baseline: MetricsResult | None = None,
    worksheet: FmecaWorksheet | None = None,
    baseline_problem: str | None = None,
) -> list[RuleResult]:
    """One :class:`RuleResult` per rule of ``policy`` (a validated :class:`clgate.policy.Policy`)."""
    results = []
    for i, rule in enumerate(policy.rules):
        label = rule_label(rule, i)
        metric: str | None
        if isinstance(rule, MetricRule):
            metric = rule.metric
        elif isinstance(rule, ClassRule):
            metric = "class_accuracy"
        elif isinstance(rule, BaselineRule):
            metric = rule.baseline
        else:
            metric = f"fmeca.{rule.fmeca}"
        base = {"index": i, "id": label, "kind": rule.kind, "metric": metric, "severity": rule.severity}
        try:
            if isinstance(rule, MetricRule):
                judged = _judge_metric(rule, runs)
            elif isinstance(rule, ClassRule):
                judged = _judge_class(rule, runs)
            elif isinstance(rule, BaselineRule):
                if baseline_problem:
                    raise RuleError(baseline_problem)
                _require_complete(runs, baseline)
                hib = None if rule.baseline == "classes" else metric_info(rule.baseline).higher_is_better
                judged = _judge_baseline(rule, runs, baseline, hib)
            else:
                if worksheet is None:
                    raise RuleError("no FMECA worksheet (no per-class statistics)")
                _require_complete(runs, None)
                judged = _judge_fmeca(rule, worksheet)
        except RuleError as exc:
            extra: dict[str, Any] = (
                {"evidence": {"incomplete": exc.missing}} if isinstance(exc, IncompleteInput) else {}
            )
            results.append(
                RuleResult(**base, status="error", passed=None, message=f"cannot evaluate: {exc}", **extra)
            )
            continue
        passed = judged.margin >= -TOLERANCE
        status: RuleStatus = "pass" if passed else ("fail" if rule.severity == "block" else "warn")
        results.append(
            RuleResult(
                **base,
                value=judged.value,
                threshold=judged.threshold,
                comparison=judged.comparison,  # type: ignore[arg-type]
                margin=judged.margin,
                passed=passed,
                status=status,
                message=judged.message,
                evidence=judged.evidence,
            )
        )
    return results


def verdict_of(
    results: Sequence[RuleResult],
    errors: Sequence[str] = (),
    diverged: Sequence[str] = (),
    incomplete: Sequence[str] = (),
) -> Verdict:
    """ERROR over FAIL over WARN over PASS; a diverged run is FAIL whatever its rules say (it cannot
    pass, and "could not judge" would hide that the candidate blew up), unless the inputs are invalid.
    Incomplete input (a partial run or baseline) never passes: a violation seen in it is FAIL, anything
    else is ERROR — even when every rule only looked at the finished tasks, the release would rest on a
    run nobody saw to its end.

    >>> verdict_of([]), verdict_of([], ["bad log"]), verdict_of([], diverged=["seed 1: loss nan"])
    ('PASS', 'ERROR', 'FAIL')
    >>> verdict_of([], incomplete=["seed 0: 2 of 5 tasks finished"])
    'ERROR'
    """
    statuses = {r.status for r in results}
    if errors:
        return "ERROR"
    if diverged:
        return "FAIL"
    if "error" in statuses:
        return "ERROR"
    if "fail" in statuses:
        return "FAIL"
    if incomplete:
        return "ERROR"
    if "warn" in statuses:
        return "WARN"
    return "PASS"


def worksheet_for(policy: Any, runs: Sequence[MetricsResult]) -> tuple[FmecaWorksheet | None, list[str]]:
    """The FMECA worksheet and configuration problems (ratings for classes that do not exist)."""
    if not runs or not runs[0].classes:
        return None, []
    return build_worksheet(runs, policy.fmeca), unknown_rated_classes(policy.fmeca, runs[0].classes)

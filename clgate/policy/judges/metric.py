"""Metric rules: a floor and/or a ceiling on a registry metric (``{metric: mica, floor: 0.6}``).

- ``at``: ``final`` judges the last task; ``task:N`` task N (1-based); ``worst`` the least favourable
  task; ``all`` the same value, with every failing task listed in the evidence. Tasks where a metric
  is undefined by its definition in every run (forgetting at task 1) are skipped by ``worst``/``all``.
- ``over_runs``: ``worst`` takes, per task, the least favourable run (its seed is the evidence);
  ``mean`` the mean over runs. A value missing in any run cannot be averaged: the rule is an error.
- Two-sided rules judge the floor on the run lowest and the ceiling on the run highest; the evidence
  names both (``floor``/``ceiling``: value, task, seed, run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
    metric_series,
    null_reason,
    seed_of,
    unfinished,
)
from clgate.policy.model import LCB_METRICS
from clgate.schemas.metrics import MetricsResult
from clgate.schemas.policy import MetricRule, parse_at


def _task_evidence(result: MetricsResult, metric: str, pos: int | None) -> Any:
    ev = result.evidence.get(metric)
    if ev is None:
        return None
    if isinstance(ev, list):
        if pos is not None and 0 <= pos < len(ev):
            return ev[pos]
        return None
    return ev


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
            entry = out.setdefault(i, {"seed": seed_of(runs[i], i), "run": i, "tasks": [], "why": why})
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
    series = [metric_series(r, metric) for r in runs]
    per_task = series[0][1]
    width = max(len(s[0]) for s in series)
    grid: list[list[float | None]] = []
    missing: dict[tuple[int, int], str] = {}
    for i, (r, (vals, _)) in enumerate(zip(runs, series, strict=True)):
        row = [vals[k] if k < len(vals) else None for k in range(width)]
        for k in range(width):
            if unfinished(r) and (not per_task or k >= r.finished_tasks):
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
                    missing[(i, k)] = f"{metric} null ({null_reason([runs[i]], metric)})"
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
            raise RuleError(f"{source} is null{where}: {null_reason(runs, source)}")
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
        raise RuleError(f"{source} is null at every task: {null_reason(runs, source)}")
    worst = min(judged, key=lambda j: (j[0], j[1])) if judged else None
    return worst, lacking


def judge_metric(rule: MetricRule, runs: Sequence[MetricsResult], inputs: Inputs) -> Judged:
    """The least favourable side (floor or ceiling), task and run of a metric rule."""
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
    evidence = _position(runs, cells, source, k, run)
    if len(sides) == 2:  # two-sided: each side judged on its own worst run, both named
        for s, (sm, sk, sv, srun) in results.items():
            evidence[s] = {
                "value": sv,
                "margin": sm,
                "threshold": getattr(rule, s),
                **_named(runs, cells, sk, srun),
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
    return Judged(v, thr, cmp, m, evidence, message)


def _named(runs: Sequence[MetricsResult], cells: _Cells, k: int, run: int | None) -> dict[str, Any]:
    """Where a value is: its task (per-task metrics) and its run (or ``over_runs: mean``)."""
    return {
        **({"task": k + 1} if cells.per_task else {}),
        **({"seed": seed_of(runs[run], run), "run": run} if run is not None else {"over_runs": "mean"}),
    }


def _position(
    runs: Sequence[MetricsResult], cells: _Cells, source: str, k: int, run: int | None
) -> dict[str, Any]:
    """The evidence of the judged value: task, run, and the metric's own evidence there (``detail``)."""
    evidence = _named(runs, cells, k, run)
    pos = k if cells.per_task else None
    if run is not None:
        detail = _task_evidence(runs[run], source, pos)
    else:
        detail = _task_evidence(runs[0], source, pos) if len(runs) == 1 else None
    if detail is not None:
        evidence["detail"] = detail
    return evidence


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


JUDGE = Judge("metric", MetricRule, subject=lambda rule: rule.metric, judge=judge_metric)

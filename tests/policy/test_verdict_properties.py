"""Issue 9, as properties over random logs and policies (hypothesis): what the gate did not see can
never raise its verdict, and no threshold made stricter can either.

Order: PASS > WARN > FAIL = ERROR (both stop a release; an incomplete input may turn a FAIL into an
ERROR, never into a PASS). ``over_runs: worst`` (the default) only: the mean over seeds is by
nature not monotone in the seeds (a good seed raises the mean).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from clgate.policy import decide, parse_policy
from clgate.schemas.evaluation_log import EvaluationLog

RANK = {"PASS": 2, "WARN": 1, "FAIL": 0, "ERROR": 0}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PER_TASK = ["acc", "mica", "min_acc", "mica_old", "min_class_acc", "forg", "af"]
SCALARS = ["wamica", "wc_acc", "bwt", "a_lifetime", "wf10"]


@st.composite
def logs(draw: Any, n_tasks: int, seed: int) -> dict[str, Any]:
    """A complete log: ``n_tasks`` tasks of 1–2 classes, 1–3 points a task, counts out of 10."""
    sizes = draw(st.lists(st.integers(1, 2), min_size=n_tasks, max_size=n_tasks))
    tasks, c = [], 0
    for s in sizes:
        tasks.append(list(range(c, c + s)))
        c += s
    points, it = [], 0
    for k in range(n_tasks):
        seen = sum(sizes[: k + 1])
        for _j in range(draw(st.integers(1, 3))):
            it += draw(st.integers(1, 5))
            correct = [draw(st.integers(0, 10)) if i < seen else 0 for i in range(c)]
            total = [10 if i < seen else 0 for i in range(c)]
            points.append(
                {
                    "iteration": it,
                    "task": k + 1,
                    "task_end": False,
                    "correct": correct,
                    "total": total,
                }
            )
        points[-1]["task_end"] = True
    return {"tasks": tasks, "points": points, "meta": {"seed": seed}}


def truncated(doc: dict[str, Any], keep: int) -> dict[str, Any]:
    """The log cut after ``keep`` points (at least its last point dropped): a valid partial log."""
    out = copy.deepcopy(doc)
    out["points"] = out["points"][: min(keep, len(out["points"]) - 1)]
    out["partial"] = True
    return out


threshold = st.floats(0.0, 1.0, allow_nan=False).map(lambda x: round(x, 2))


@st.composite
def rules(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["per_task", "scalar", "class"]))
    severity = draw(st.sampled_from(["block", "warn"]))
    if kind == "class":
        at = draw(st.sampled_from(["final", "min_after_learned"]))
        return {"classes": "*", "at": at, "floor": draw(threshold), "severity": severity}
    rule: dict[str, Any] = {"severity": severity}
    if kind == "per_task":
        rule["metric"] = draw(st.sampled_from(PER_TASK))
        rule["at"] = draw(st.sampled_from(["final", "worst", "all", "task:1", "task:2"]))
    else:
        rule["metric"] = draw(st.sampled_from(SCALARS))
    lo, hi = sorted((draw(threshold), draw(threshold)))
    sides = draw(st.sampled_from(["floor", "ceiling", "both"]))
    if sides in ("floor", "both"):
        rule["floor"] = lo if sides == "both" else draw(threshold)
    if sides in ("ceiling", "both"):
        rule["ceiling"] = hi if sides == "both" else draw(threshold)
    return rule


policies = st.lists(rules(), min_size=1, max_size=3).map(lambda rs: {"name": "random", "rules": rs})


def verdict(docs: list[dict[str, Any]], policy: dict[str, Any]) -> str:
    return decide([EvaluationLog.model_validate(d) for d in docs], parse_policy(policy)).verdict


@st.composite
def job(draw: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    n_tasks = draw(st.integers(2, 3))
    runs = [draw(logs(n_tasks, seed)) for seed in range(draw(st.integers(1, 2)))]
    # every run of one job shares the task split
    for r in runs[1:]:
        if r["tasks"] != runs[0]["tasks"]:
            r.update(copy.deepcopy(_with_tasks(r, runs[0]["tasks"])))
    return runs, draw(policies)


def _with_tasks(doc: dict[str, Any], tasks: list[list[int]]) -> dict[str, Any]:
    """``doc``'s task structure replaced by ``tasks`` (accuracies redrawn from doc's first counts)."""
    c = sum(len(t) for t in tasks)
    fill = [p["correct"][0] for p in doc["points"]] or [5]
    points = []
    for k in range(len(tasks)):
        seen = sum(len(t) for t in tasks[: k + 1])
        points.append(
            {
                "iteration": k + 1,
                "task": k + 1,
                "task_end": True,
                "correct": [fill[(k + i) % len(fill)] if i < seen else 0 for i in range(c)],
                "total": [10 if i < seen else 0 for i in range(c)],
            }
        )
    return {"tasks": tasks, "points": points, "meta": doc["meta"]}


@SETTINGS
@given(job(), st.integers(0, 12), st.data())
def test_truncating_a_log_never_raises_the_verdict(case, keep, data):
    runs, policy = case
    before = verdict(runs, policy)
    i = data.draw(st.integers(0, len(runs) - 1))
    cut = [*runs[:i], truncated(runs[i], keep), *runs[i + 1 :]]
    after = verdict(cut, policy)
    assert RANK[after] <= RANK[before], (before, after)
    assert after != "PASS"


@SETTINGS
@given(job(), st.integers(0, 12), st.booleans(), st.data())
def test_adding_a_seed_partial_or_not_never_raises_the_verdict(case, keep, partial, data):
    runs, policy = case
    before = verdict(runs, policy)
    extra = _with_tasks(data.draw(logs(len(runs[0]["tasks"]), 99)), runs[0]["tasks"])
    if partial:
        extra = truncated(extra, keep)
    after = verdict([*runs, extra], policy)
    assert RANK[after] <= RANK[before], (before, after)
    if partial:
        assert after != "PASS"


@SETTINGS
@given(job(), st.data())
def test_the_verdict_is_monotone_in_every_threshold(case, data):
    runs, policy = case
    before = verdict(runs, policy)
    stricter = copy.deepcopy(policy)
    rule = stricter["rules"][data.draw(st.integers(0, len(stricter["rules"]) - 1))]
    step = data.draw(st.floats(0.0, 1.0, allow_nan=False))
    side = data.draw(st.sampled_from([s for s in ("floor", "ceiling") if s in rule]))
    if side == "floor":
        rule["floor"] = min(1.0, rule["floor"] + step)
    else:
        rule["ceiling"] = max(0.0, rule["ceiling"] - step)
    assume(rule.get("floor", 0.0) <= rule.get("ceiling", 1.0))  # a floor above the ceiling is refused
    after = verdict(runs, stricter)
    assert RANK[after] <= RANK[before], (before, after, policy, stricter)

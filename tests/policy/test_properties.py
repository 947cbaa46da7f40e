"""Invariants of the FMECA ratings and of the rules (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from clgate.fmeca import action_priority, occurrence_rating
from clgate.policy import evaluate_rules, parse_policy
from clgate.schemas.metrics import MetricsResult
from clgate.schemas.policy import PRIORITY_RANK

rating = st.integers(1, 10)
rate = st.floats(0.0, 1.0, allow_nan=False)


@given(rate, rate)
def test_occurrence_is_monotone_in_the_error_rate(a, b):
    lo, hi = sorted((a, b))
    assert 1 <= occurrence_rating(lo) <= occurrence_rating(hi) <= 10


@given(rating, rating, rating, st.sampled_from(["s", "o", "d"]))
def test_action_priority_never_drops_when_a_rating_rises(s, o, d, which):
    base = PRIORITY_RANK[action_priority(s, o, d)]
    s2, o2, d2 = (
        (min(10, s + 1), o, d)
        if which == "s"
        else (s, min(10, o + 1), d)
        if which == "o"
        else (s, o, min(10, d + 1))
    )
    assert PRIORITY_RANK[action_priority(s2, o2, d2)] >= base


def _status(value: float, rule: dict) -> str:
    policy = parse_policy({"name": "p", "rules": [rule]})
    result = MetricsResult(metrics={"wamica": value}, n_tasks=1, n_classes=0, finished_tasks=1)
    return evaluate_rules(policy, [result])[0].status


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
def test_a_higher_floor_never_turns_a_fail_into_a_pass(value, f1, f2):
    lo, hi = sorted((f1, f2))
    if _status(value, {"metric": "wamica", "floor": hi}) == "pass":
        assert _status(value, {"metric": "wamica", "floor": lo}) == "pass"
    assert (_status(value, {"metric": "wamica", "floor": lo}) == "pass") == (value >= lo - 1e-9)

"""The policy engine: load a ``clgate.policy/v1`` document, evaluate it on evaluation logs, decide.

>>> policy = parse_policy('''
... name: demo
... rules:
...   - {metric: mica, floor: 0.5}
... ''')
>>> policy.rules[0].metric, policy.rules[0].floor
('mica', 0.5)
>>> parse_policy({"name": "x", "rules": [{"metric": "mika", "floor": 0.5}]})
Traceback (most recent call last):
...
clgate.policy.model.PolicyError: invalid policy
  rules[0].metric: unknown metric id 'mika' (did you mean 'mica'?)
"""

from clgate.policy.decide import Evaluation, GateResult, decide, evaluate, headline, log_hash, policy_hash
from clgate.policy.evaluate import TOLERANCE, evaluate_rules, verdict_of
from clgate.policy.model import LCB_METRICS, Policy, PolicyError, load_policy, parse_policy

__all__ = [
    "LCB_METRICS",
    "TOLERANCE",
    "Evaluation",
    "GateResult",
    "Policy",
    "PolicyError",
    "decide",
    "evaluate",
    "evaluate_rules",
    "headline",
    "load_policy",
    "log_hash",
    "parse_policy",
    "policy_hash",
    "verdict_of",
]

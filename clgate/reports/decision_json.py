"""``decision.json`` and ``metrics.json``: the decision (with its hash) and the metrics behind it."""

from __future__ import annotations

import json
from typing import Any

from clgate.schemas.decision import Decision, decision_sha256


def decision_file(decision: Decision) -> str:
    """``decision.json``: the decision document plus ``sha256``, the hash of the rest of it
    (:func:`clgate.schemas.decision.decision_sha256`; ``clgate audit verify --decision FILE`` checks it)."""
    document = decision.model_dump(mode="json")
    document["sha256"] = decision_sha256(document)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def metrics_file(metrics: Any | None, baseline_metrics: Any | None) -> str:
    """``metrics.json``: the candidate's and the baseline's metrics results (``null`` when absent)."""
    document: dict[str, Any] = {
        "format": "clgate.metrics/v1",
        "runs": json.loads(metrics.model_dump_json()) if metrics is not None else None,
        "baseline": json.loads(baseline_metrics.model_dump_json()) if baseline_metrics is not None else None,
    }
    return json.dumps(document, indent=2) + "\n"

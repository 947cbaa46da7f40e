"""The gate, end to end: logs + policy (+ baseline) → decision (+ the report files).

Both the CLI (``clgate gate``, ``clgate demo``) and the service workers call :func:`gate_logs`; the
decision itself is :func:`clgate.policy.decide` (pure), the files come from :mod:`clgate.reports`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from clgate.policy import GateResult, Policy, evaluate
from clgate.policy.decide import LogLike
from clgate.reports import write_reports

__all__ = ["GateResult", "gate_logs"]


def gate_logs(
    logs: Sequence[LogLike],
    policy: Policy,
    *,
    baseline: LogLike | None = None,
    out_dir: Path | None = None,
    provenance: dict | None = None,
    report_url: str | None = None,
) -> GateResult:
    """Decide on ``logs`` (several logs = several seeds of one job) and, with ``out_dir``, write
    ``report.html``, ``report.md``, ``decision.json``, ``metrics.json``, ``fmeca.csv`` and ``junit.xml``
    (``report_url``: where report.html will be served, linked from report.md).
    """
    started, t0 = datetime.now(UTC), time.perf_counter()
    result = evaluate(logs, policy, baseline=baseline, provenance=provenance)
    if out_dir is not None:
        result.files = write_reports(
            result.decision,
            Path(out_dir),
            metrics=result.metrics,
            baseline_metrics=result.baseline_metrics,
            logs=list(logs),
            policy=policy,
            generated_at=started,
            elapsed_s=time.perf_counter() - t0,
            report_url=report_url,
        )
    return result

"""Writing the report files of one gate decision into a folder, each from its renderer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clgate.reports.decision_json import decision_file, metrics_file
from clgate.reports.fmeca_csv import fmeca_csv
from clgate.reports.html_report import render_html
from clgate.reports.junit import render_junit
from clgate.reports.markdown import render_markdown
from clgate.schemas.decision import Decision

REPORT_FILES = ("report.html", "report.md", "decision.json", "metrics.json", "fmeca.csv", "junit.xml")


def write_reports(
    decision: Decision,
    out_dir: Path,
    *,
    metrics: Any | None = None,
    baseline_metrics: Any | None = None,
    logs: Sequence[Any] = (),
    policy: Any | None = None,
    report_url: str | None = None,
    generated_at: datetime | None = None,
    elapsed_s: float = 0.0,
) -> dict[str, Path]:
    """Write the six report files into ``out_dir`` (created); returns ``{file name: path}``.

    ``report_url``: where report.html will be served (report.md links to it). ``generated_at`` and
    ``elapsed_s``: the date in the HTML header and JUnit's ``timestamp``/``time``. The PDF is separate:
    :func:`~clgate.reports.pdf.write_pdf` (it needs Chromium)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    when = generated_at or datetime.now(UTC)
    contents = {
        "decision.json": decision_file(decision),
        "metrics.json": metrics_file(metrics, baseline_metrics),
        "fmeca.csv": fmeca_csv(decision.fmeca),
        "junit.xml": render_junit(decision, timestamp=when, time_s=elapsed_s),
        "report.md": render_markdown(decision, report_url=report_url),
        "report.html": render_html(decision, metrics=metrics, logs=logs, policy=policy, generated_at=when),
    }
    paths = {}
    for name in REPORT_FILES:
        path = out_dir / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(contents[name], encoding="utf-8")
        tmp.replace(path)
        paths[name] = path
    return paths

"""``report.html``: one self-contained page (Jinja2 templates in ``templates/``, figures as inline SVG)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from clgate.fmt import fmt
from clgate.metrics import LogArrays
from clgate.provenance import build_label, candidate_label
from clgate.reports.text import (
    ICON,
    VERDICT_ICON,
    column_words,
    evidence_text,
    fmeca_counts,
    fmeca_note,
    pct,
    plugin_metric_rows,
    pooled_counts_text,
    threshold_text,
    worst_moment_text,
    worst_pooled_text,
)
from clgate.schemas.decision import Decision


def css_string(text: Any) -> str:
    """User text as a quoted CSS string (the printed page header): every character other than letters,
    digits, space and ``.,:-`` as a CSS hex escape, so nothing can close the string or the style sheet.
    The one escaping helper for CSS.

    >>> print(css_string('a"b</style>'))
    "a\\22 b\\3c \\2f style\\3e "
    """
    out = ['"']
    for ch in " ".join(str(text).splitlines()):
        out.append(ch if ch.isascii() and (ch.isalnum() or ch in " .,:-") else f"\\{ord(ch):x} ")
    out.append('"')
    return "".join(out)


def _matrix_color(s: int, o: int) -> str:
    risk = s * o
    if risk >= 56:
        return "#f4a6a6"
    if risk >= 30:
        return "#f9d49b"
    if risk >= 12:
        return "#fbf1a9"
    return "#d8efd3"


def model_label(decision: Decision, logs: Sequence[Any] = ()) -> str:
    """What the report is about, for its header: the caller's ``model`` (provenance) or the logs'
    model and strategy."""
    given = candidate_label(decision.provenance) or decision.provenance.get("model")
    if given:
        return str(given)
    meta = logs[0].meta if logs else {}
    parts = [str(x) for x in (meta.get("model"), decision.strategy or meta.get("strategy")) if x]
    return " · ".join(parts) or "model not recorded"


def render_html(
    decision: Decision,
    *,
    metrics: Any | None = None,
    logs: Sequence[Any] = (),
    policy: Any | None = None,
    generated_at: datetime | None = None,
) -> str:
    """One self-contained HTML file: decision and rules first, then figures, FMECA, provenance. For NI/NIC
    logs the labels say cell where a column is one, and the headline adds each class pooled over its cells.

    Screen: full-width figures, tables that reflow into cards on narrow screens. Print (and the PDF):
    a header with model, verdict, policy and date on every page, rows and figures not split,
    provenance printed in full."""
    import jinja2

    figs, notes = _figures(decision, metrics, logs)

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("clgate.reports", "templates"),
        autoescape=True,  # every value is escaped; only the figures' SVG is marked safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["pct"] = pct
    env.filters["css_string"] = css_string
    env.globals.update(
        evidence_text=evidence_text,
        threshold_text=threshold_text,
        icon=ICON,
        verdict_icon=VERDICT_ICON,
        matrix_color=_matrix_color,
        fmeca_counts=fmeca_counts,
        plugin_metric_rows=plugin_metric_rows,
        pooled_counts_text=pooled_counts_text,
    )
    template = env.get_template("report.html.j2")
    when = (generated_at or datetime.now(UTC)).astimezone(UTC)
    return template.render(
        d=decision,
        figs=figs,
        notes=notes,
        policy=policy,
        model=model_label(decision, logs),
        date=when.strftime("%Y-%m-%d %H:%M UTC"),
        page_header=" · ".join(
            part
            for part in (
                model_label(decision, logs),
                decision.verdict,
                f"policy {decision.policy_name} v{decision.policy_version}",
                build_label(decision.provenance),
                when.strftime("%Y-%m-%d %H:%M UTC"),
            )
            if part
        ),
        build=decision.provenance.get("build") or {},
        skipped_without_baseline=decision.provenance.get("skipped_without_baseline") or [],
        worst_moment=worst_moment_text(decision),
        worst_pooled=worst_pooled_text(decision),
        w=column_words(decision),
        fmeca_note=fmeca_note(decision),
        provenance_json=json.dumps(decision.provenance, indent=2, sort_keys=True, default=str),
        decision_json=decision.model_dump_json(indent=2),
    )


def _figures(
    decision: Decision, metrics: Any | None, logs: Sequence[Any]
) -> tuple[dict[str, str], list[str]]:
    """The report's figures (inline SVG, by name) and the notes on what they cannot show."""
    # lazy: matplotlib — only the HTML report draws figures
    from clgate.reports import figures

    figs: dict[str, str] = {}
    notes: list[str] = []
    if metrics is not None and metrics.runs:
        runs = metrics.runs
        figs["acc_mica"] = figures.acc_vs_mica(runs)
        figs["raa_raf"] = figures.raa_raf(runs)
        if logs:
            arrays = [LogArrays.from_log(log, task_accuracy=runs[0].task_accuracy) for log in logs]
            figs["boxplots"] = figures.class_boxplots(arrays)
            # the heatmap of the run with the worst moment (the first run when there is none)
            w = decision.headline.worst_moment
            seeds = [log.meta.get("seed", i) for i, log in enumerate(logs)]
            j = seeds.index(w.seed) if w is not None and w.seed in seeds else 0
            figs["heatmap"] = figures.class_heatmap(arrays[j], seed=seeds[j], worst=w)
            figs["stability_gap"] = figures.stability_gap(arrays[0], seed=logs[0].meta.get("seed"))
            if not arrays[0].continual:
                notes.append(
                    "The log was evaluated at task ends only: the stability gap between task "
                    "ends is not visible."
                )
    else:
        notes.append("No metrics: the inputs were invalid, figures are omitted.")
    return figs, notes

"""``report.md``: a short Markdown summary for a CI step summary or a pull-request comment, and the
summary for inputs that could not be judged. Stable: the same decision gives the same bytes."""

from __future__ import annotations

import re
from typing import Any

from clgate.fmt import fmt, printable
from clgate.provenance import candidate_label
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
    priority_text,
    threshold_text,
    worst_moment_text,
    worst_pooled_text,
)
from clgate.schemas.decision import Decision

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#!|~])")
_MD_ORDERED = re.compile(r"^(\d+)([.)])")


def md_text(text: Any) -> str:
    """User text (class names, rule ids, messages) made inert in Markdown: one line, Markdown
    punctuation backslash-escaped, ``&``, ``<`` and ``>`` as entities (no raw HTML; links and tables cannot
    break), control characters made visible (:func:`clgate.fmt.printable`).
    The one escaping helper of the Markdown renderer; HTML relies on Jinja's autoescape.

    >>> print(md_text("a|b *c* <script>"))
    a\\|b \\*c\\* &lt;script&gt;
    """
    t = printable(" ".join(str(text).splitlines()))  # no ANSI escape nor control character survives
    t = t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    t = _MD_SPECIAL.sub(r"\\\1", t)
    t = _MD_ORDERED.sub(r"\1\\\2", t)  # "1. x" would start an ordered list
    return "\\" + t if t[:1] in ("-", "+", "=", ">") else t  # no list, quote or heading at a line's start


def render_markdown(decision: Decision, *, report_url: str | None = None, max_fmeca_rows: int = 10) -> str:
    """A short summary for a CI step summary or a pull-request comment (stable for a fixed decision).

    ``report_url``: where the full HTML report will be (linked at the top). The FMECA lists its top
    ``max_fmeca_rows`` rows and says how many more the full report and fmeca.csv have.
    """
    lines = [
        *_md_header(decision, report_url),
        *_md_rules(decision),
        *_md_headline(decision),
        *_md_fmeca(decision, report_url, max_fmeca_rows),
        *_md_footer(decision),
    ]
    return "\n".join(lines)


def _md_header(d: Decision, report_url: str | None) -> list[str]:
    """Verdict, policy and runs, the link to the full report, the summary and the input errors."""
    lines = [
        f"## {VERDICT_ICON[d.verdict]} clgate gate: {d.verdict}",
        "",
        *_build_markdown(d.provenance),
        f"Policy **{md_text(d.policy_name)}** v{md_text(d.policy_version)} · {d.runs} run(s)"
        + (f" · strategy {md_text(d.strategy)}" if d.strategy else "")
        + (
            f" · seeds {md_text(', '.join(map(str, d.seeds)))}" if any(s is not None for s in d.seeds) else ""
        ),
        "",
    ]
    if report_url:
        lines += [f"[Full report (figures, FMECA worksheet, provenance)](<{_md_url(report_url)}>)", ""]
    lines += [md_text(d.summary), ""]
    for err in d.errors:
        lines.append(f"- ⛔ {md_text(err)}")
    if d.errors:
        lines.append("")
    return lines


def _md_rules(d: Decision) -> list[str]:
    """One table row per rule."""
    lines = [
        "| | rule | value | threshold | margin | evidence |",
        "|---|---|---:|---|---:|---|",
    ]
    for r in d.rules:
        value = fmt(r.value) if r.status != "error" else "error"
        ev = evidence_text(r.evidence, column=column_words(d)["column"]) if r.status != "error" else r.message
        sev = " (warn)" if r.severity == "warn" else ""
        lines.append(
            f"| {ICON[r.status]} | {md_text(r.id)}{sev} | {value} | {md_text(threshold_text(r))} "
            f"| {fmt(r.margin)} | {md_text(ev)} |"
        )
    return lines


def _md_headline(d: Decision) -> list[str]:
    """The headline metrics, the worst class (NI/NIC: cell) at its worst moment and the worst classes;
    for NI/NIC logs the worst class pooled over its cells and the pooled table."""
    h = d.headline
    w = column_words(d)
    lines = [
        "",
        f"**Headline** (mean over runs): ACC {fmt(h.acc)} · MICA {fmt(h.mica)} · WAMICA {fmt(h.wamica)} · "
        f"min-ACC {fmt(h.min_acc)}"
        + (f" · class regression {fmt(h.class_regression)}" if h.class_regression is not None else ""),
        "",
        f"**Worst {w['column']} at its worst moment**: {md_text(worst_moment_text(d))}",
    ]
    pooled = worst_pooled_text(d)
    if pooled:
        lines += ["", f"**Worst class pooled over its cells**: {md_text(pooled)}"]
    if h.worst_classes:
        worst = ", ".join(f"{md_text(repr(c.name))} {fmt(c.accuracy, 3)}" for c in h.worst_classes[:3])
        lines += ["", f"Worst {w['columns']} (final accuracy): {worst}"]
    if h.plugins:
        values = " · ".join(f"{md_text(label)} {fmt(v)}" for label, v in plugin_metric_rows(d))
        lines += ["", f"**Plug-in metrics** (final, mean over runs): {values}"]
    return lines + _md_pooled(d)


def _md_pooled(d: Decision, max_rows: int = 10) -> list[str]:
    """NI/NIC logs: each class pooled over its cells, lowest first (the first ``max_rows``)."""
    pooled = d.headline.pooled_classes
    if not pooled:
        return []
    over = " (accuracy: mean over runs)" if d.runs > 1 else ""
    lines = [
        "",
        f"**Per class, pooled over its cells** (lowest first{over}; the rules and the FMECA judge cells)",
        "",
        "| class | final (pooled) | correct / total | cells | worst cell | its final |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for p in pooled[:max_rows]:
        lines.append(
            f"| {md_text(p.name)} | {fmt(p.accuracy)} | {pooled_counts_text(p, d.runs)} | {len(p.cells)} "
            f"| {md_text(p.worst_cell or '—')} | {fmt(p.worst_cell_accuracy)} |"
        )
    if len(pooled) > max_rows:
        lines += ["", f"{len(pooled) - max_rows} more class(es) in report.html and decision.json."]
    return lines


def _md_fmeca(d: Decision, report_url: str | None, max_fmeca_rows: int) -> list[str]:
    """The FMECA counts, the note, the top rows and how many more the full report has."""
    if d.fmeca is None or not d.fmeca.rows:
        return []
    rows = d.fmeca.rows
    shown = rows[:max_fmeca_rows]
    lines = [
        "",
        (
            f"**FMECA** ({len(rows)} failure modes, top {len(shown)} shown), action priority by "
            f"{fmeca_counts(d.fmeca)}"
        ),
    ]
    note = fmeca_note(d)
    if note:
        lines += ["", f"> {md_text(note)}"]
    lines += [
        "",
        f"| # | {column_words(d)['column']} | task | S | final error | worst error | at | O worst | D "
        "| RPN worst | priority |",
        "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for i, row in enumerate(shown, start=1):
        at = (
            ", ".join(
                ([f"iteration {row.worst_iteration}"] if row.worst_iteration is not None else [])
                + ([f"seed {row.seed}"] if row.seed is not None and d.runs > 1 else [])
            )
            or "—"
        )
        lines.append(
            f"| {i} | {md_text(row.class_name)} | {row.task} | {fmt(row.severity)} | "
            f"{pct(row.final_error)} "
            f"| {pct(row.worst_error)} | {md_text(at)} | {row.occurrence_worst} | {row.detection} "
            f"| {fmt(row.rpn_worst)} | {priority_text(row.priority_worst)} |"
        )
    if len(rows) > len(shown):
        where = f"the [full report](<{_md_url(report_url)}>)" if report_url else "report.html"
        lines += ["", f"{len(rows) - len(shown)} more failure mode(s) in {where} and fmeca.csv."]
    return lines


def _md_footer(d: Decision) -> list[str]:
    """Versions and hashes, small."""
    return [
        "",
        f"<sub>clgate {md_text(d.clgate_version)} · policy sha256 `{d.hashes.policy[:12]}` · "
        f"log(s) {', '.join(f'`{x[:12]}`' for x in d.hashes.logs)}"
        + (f" · baseline `{d.hashes.baseline[:12]}`" if d.hashes.baseline else "")
        + "</sub>",
        "",
    ]


def _build_markdown(provenance: dict[str, Any]) -> list[str]:
    """The candidate and the build it came from, as the summary's first line (none if unknown)."""
    parts = []
    candidate = candidate_label(provenance)
    if candidate:
        parts.append(f"Candidate **{md_text(candidate)}**")
    build = provenance.get("build") or {}
    if build.get("commit"):
        commit = f"commit `{md_text(str(build['commit'])[:12])}`"
        run = f" · [CI run](<{_md_url(build['run_url'])}>)" if build.get("run_url") else ""
        parts.append(commit + run)
    skipped = provenance.get("skipped_without_baseline")
    if skipped:
        parts.append(f"no baseline yet: regression rules left out ({md_text(', '.join(skipped))})")
    return [" · ".join(parts), ""] if parts else []


def _md_url(url: str) -> str:
    """A URL inside ``<…>`` link syntax: no spaces, angle brackets or line breaks can end it early."""
    return "".join(c if c.isprintable() and c not in " <>" else f"%{ord(c):02X}" for c in url)


def render_input_error_markdown(message: str) -> str:
    """The Markdown summary for inputs that could not be judged."""
    longest = max((len(run) for run in re.findall(r"`+", message)), default=0)
    fence = "`" * max(
        3, longest + 1
    )  # a fence longer than any backtick run in the message: it cannot close early
    return f"## {VERDICT_ICON['ERROR']} clgate gate: ERROR (invalid input)\n\n{fence}\n{message}\n{fence}\n"

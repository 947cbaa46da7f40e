"""Reports of NI/NIC logs: each real class pooled over its cells beside the cell view, labels that say
cell where a column is one, and NC reports byte for byte as they were."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clgate.gate import gate_logs
from clgate.reports import render_markdown, write_reports
from clgate.schemas import EvaluationLog
from tests.fixtures.gate import ni_worked_example
from tests.reports.test_reports import _OVERFLOW_JS, CHROMIUM_ARGS, _open

GOLDEN = Path(__file__).parent / "golden"
WHEN = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)


def _end(task: int, correct: list[int], total: list[int]) -> dict:
    """The end of ``task`` (1-based; iteration 100 · task) with those counts."""
    return {"iteration": 100 * task, "task": task, "task_end": True, "correct": correct, "total": total}


def _ni(seed: int = 0, cat_by_day: int = 7, names: tuple[str, str] = ("cat", "dog")) -> EvaluationLog:
    """docs/metrics.md's worked example: cats and dogs by day (task 1), then by night (task 2)."""
    doc = ni_worked_example(cat_by_day=cat_by_day, names=names)
    return EvaluationLog.parse({**doc, "meta": {"seed": seed}})


def _nic() -> EvaluationLog:
    """NIC: bolts and nuts by day, all three by night (washers are new), washers by day again. The
    bolt's night cell holds twice the samples, so pooling counts (15/30) differs from averaging cells."""
    return EvaluationLog.parse(
        {
            "scenario": "nic",
            "class_of": [0, 1, 0, 1, 2, 2],
            "class_names": ["bolt", "nut", "washer"],
            "groups": ["day", "night", "day"],
            "tasks": [[0, 1], [2, 3, 4], [5]],
            "points": [
                _end(1, [9, 8, 0, 0, 0, 0], [10, 10, 0, 0, 0, 0]),
                _end(2, [8, 7, 10, 9, 6, 0], [10, 10, 20, 10, 10, 0]),
                _end(3, [7, 6, 8, 9, 3, 10], [10, 10, 20, 10, 10, 10]),
            ],
            "meta": {"seed": 0},
        }
    )


RULES = [{"metric": "acc", "floor": 0.5}, {"classes": "*", "at": "final", "floor": 0.5, "severity": "warn"}]


def _gate(tmp_path, logs, policy_of):
    policy = policy_of(*RULES, fmeca={"default_severity": 6, "default_detection": 4})
    result = gate_logs(logs, policy, out_dir=tmp_path / "out")
    html = result.files["report.html"].read_text(encoding="utf-8")
    return result, result.files["report.md"].read_text(encoding="utf-8"), html


def _pooled_rows(html: str) -> list[list[str]]:
    """The cells of the HTML's pooled table, row by row, as text."""
    table = html.split('id="pooled-classes-table"', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in body.split("</tr>") if "<td" in row]


def test_ni_reports_show_each_class_pooled_over_its_cells(tmp_path, policy_of):
    result, md, html = _gate(tmp_path, [_ni()], policy_of)
    pooled = json.loads(result.files["decision.json"].read_text())["headline"]["pooled_classes"]
    assert pooled == [
        {
            "id": 0,
            "name": "cat",
            "accuracy": pytest.approx(0.65),
            "correct": 13,
            "total": 20,
            "cells": ["cat @ day", "cat @ night"],
            "worst_cell": "cat @ night",
            "worst_cell_accuracy": pytest.approx(0.6),
        },
        {
            "id": 1,
            "name": "dog",
            "accuracy": pytest.approx(0.85),
            "correct": 17,
            "total": 20,
            "cells": ["dog @ day", "dog @ night"],
            "worst_cell": "dog @ day",
            "worst_cell_accuracy": pytest.approx(0.8),
        },
    ]
    # Markdown: the worst pooled class at a glance, then the table, lowest first
    assert (
        "**Worst class pooled over its cells**: class 'cat' at 0.6500 (13 / 20 over 2 cells; its worst cell "
        "'cat @ night' at 0.6000)"
    ) in md
    assert "| cat | 0.6500 | 13 / 20 | 2 | cat @ night | 0.6000 |\n| dog | 0.8500 | 17 / 20 |" in md
    # HTML: the same, and the worst class's row marked
    assert _pooled_rows(html) == [
        ["cat", "0.6500", "13 / 20", "2", "cat @ night", "0.6000"],
        ["dog", "0.8500", "17 / 20", "2", "dog @ day", "0.8000"],
    ]
    assert '<tr class="s-warn worst-pooled"><td class="mode" data-label="class">cat</td>' in html
    assert "Worst class pooled over its cells: <strong>class &#39;cat&#39; at 0.6500" in html


def test_ni_labels_say_cell_where_a_column_is_one(tmp_path, policy_of):
    result, md, html = _gate(tmp_path, [_ni()], policy_of)
    assert "**Worst cell at its worst moment**: cell 'cat @ day' (task 1)" in md
    assert "Worst cells (final accuracy): 'cat @ night' 0.600" in md
    assert "| # | cell | task | S |" in md
    assert "Worst class at its worst moment" not in md and "Worst classes" not in md
    assert "Worst cell at its worst moment: <strong>cell &#39;cat @ day&#39;" in html
    assert "<th>worst cell at worst moment</th>" in html and "Worst cells by final accuracy:" in html
    assert "Each cell (a class on the sample group of one task) is a failure mode" in html
    assert "Accuracy of every cell (rows" in html
    assert "Accuracy of every cell at every evaluation point" in html
    assert ">cell (task)<" in html  # the heatmap's axis
    # the rules' evidence names a cell, and the FMECA's failure modes say which group
    assert "cell &#39;cat @ night&#39;, seed 0" in html and "cell 'cat @ night', seed 0" in md
    assert result.decision.rules[1].message == "worst cell 'cat @ night': final accuracy 0.6 (meets >= 0.5)"
    modes = sorted(r.mode for r in result.decision.fmeca.rows)
    assert modes[0] == "class cat misclassified in group day"


def test_nic_pools_counts_not_cell_means_and_names_the_worst_class_apart_from_the_worst_cell(
    tmp_path, policy_of
):
    result, md, html = _gate(tmp_path, [_nic()], policy_of)
    assert _pooled_rows(html) == [
        ["bolt", "0.5000", "15 / 30", "2", "bolt @ night", "0.4000"],  # (7 + 8) / (10 + 20), not 0.55
        ["washer", "0.6500", "13 / 20", "2", "washer @ night", "0.3000"],
        ["nut", "0.7500", "15 / 20", "2", "nut @ day", "0.6000"],
    ]
    h = result.decision.headline
    assert h.worst_classes[0].name == "washer @ night"  # the worst cell …
    assert h.pooled_classes is not None and h.pooled_classes[0].name == "bolt"  # … is not the worst class
    message = "worst cell 'washer @ night': final accuracy 0.3 (violates >= 0.5; 2 cell(s) below)"
    assert result.decision.rules[1].message == message
    assert "| bolt | 0.5000 | 15 / 30 | 2 | bolt @ night | 0.4000 |" in md
    assert "class 'bolt' at 0.5000 (15 / 30 over 2 cells" in md


def test_several_runs_average_the_accuracy_and_sum_the_counts(tmp_path, policy_of):
    result, md, html = _gate(tmp_path, [_ni(seed=0), _ni(seed=1, cat_by_day=4)], policy_of)
    cat = result.decision.headline.pooled_classes[0]
    # run 0: 13/20 = 0.65, run 1: 10/20 = 0.5; cat @ day 0.7 and 0.4 (mean 0.55) is its worst cell
    assert (cat.name, cat.correct, cat.total) == ("cat", 23, 40)
    assert cat.accuracy == pytest.approx(0.575)
    assert (cat.worst_cell, cat.worst_cell_accuracy) == ("cat @ day", pytest.approx(0.55))
    assert _pooled_rows(html)[0] == ["cat", "0.5750", "23 / 40 (2 runs)", "2", "cat @ day", "0.5500"]
    assert "(accuracy: mean over runs; counts: summed over runs)" in html
    assert "| cat | 0.5750 | 23 / 40 (2 runs) | 2 | cat @ day | 0.5500 |" in md


def test_class_names_stay_inert_in_the_pooled_views(tmp_path, policy_of):
    _, md, html = _gate(tmp_path, [_ni(names=("<b>cat</b>", "d|g"))], policy_of)
    assert "<b>cat</b>" not in html and "&lt;b&gt;cat&lt;/b&gt;" in html
    assert "| &lt;b&gt;cat&lt;/b&gt; | 0.6500 |" in md and "| d\\|g | 0.8500 |" in md


def _without_figures(html: str) -> str:
    """The page without its inline SVG figures (matplotlib's output, checked by the figure tests)."""
    return re.sub(r"<svg\b.*?</svg>", "<svg/>", html, flags=re.S)


def test_nc_reports_are_byte_identical_to_before_the_ni_view(tmp_path, forgetful_log, policy_of):
    """An NC decision has no pooled view: its report.md (the golden in test_reports.py), decision.json and
    report.html read as before the NI view existed (golden/report-nc.html: the page rendered before that
    change, figures left out)."""
    rules = [
        {"metric": "acc", "floor": 0.8},
        {"metric": "mica", "at": "worst", "floor": 0.7, "id": "worst-class"},
        {"metric": "min_class_acc", "floor": 0.25, "severity": "warn"},
        {"classes": ["bee", "cat"], "at": "min_after_learned", "floor": 0.8},
        {"fmeca": "rpn", "limit": 500},
    ]
    policy = policy_of(*rules, fmeca={"default_severity": 6, "severity": {"ant": 9}, "default_detection": 4})
    policy = policy.model_copy(update={"name": "p"})
    logs = [forgetful_log(seed=3)]
    result = gate_logs(logs, policy, provenance={"x": 1})
    assert result.decision.headline.pooled_classes is None
    assert "pooled_classes" not in result.decision.model_dump_json()
    files = write_reports(
        result.decision, tmp_path, metrics=result.metrics, logs=logs, policy=policy, generated_at=WHEN
    )
    html = _without_figures(files["report.html"].read_text(encoding="utf-8"))
    golden = GOLDEN / "report-nc.html"
    assert html == golden.read_text(encoding="utf-8")
    assert " cell" not in render_markdown(result.decision)


@pytest.mark.parametrize("width", [1280, 390])
def test_ni_html_renders_the_pooled_table_in_headless_chromium(tmp_path, policy_of, require_binary, width):
    chromium = require_binary("chromium")
    from playwright.sync_api import sync_playwright

    result, _, _ = _gate(tmp_path, [_nic()], policy_of)
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            _open(page, result.files["report.html"], problems, requests)
            assert "class 'bolt' at 0.5000" in page.inner_text("#worst-pooled-class")
            assert page.inner_text("#worst-moment").startswith("Worst cell at its worst moment: cell ")
            rows = page.locator("#pooled-classes-table tbody tr")
            assert rows.count() == 3
            first = rows.first
            assert "worst-pooled" in (first.get_attribute("class") or "")
            assert first.locator("td").first.inner_text() == "bolt"
            # the worst class's row stands out: its background differs from the next row's
            color = "e => getComputedStyle(e).backgroundColor"
            second = rows.nth(1).locator("td").first
            assert first.locator("td").first.evaluate(color) != second.evaluate(color)
            assert page.evaluate(_OVERFLOW_JS) == []
            if width < 500:  # narrow: the pooled rows reflow into labelled cards too
                label = first.locator("td").nth(2).evaluate("e => getComputedStyle(e, '::before').content")
                assert label == '"correct / total"'
        finally:
            browser.close()
    assert problems == []
    assert all(u.startswith(("file://", "data:")) for u in requests), requests


def test_the_pdf_of_an_ni_report_prints_the_pooled_view(tmp_path, policy_of, require_binary):
    require_binary("chromium")
    pdftotext = require_binary("pdftotext")
    import subprocess

    from clgate.reports import write_pdf

    result, _, _ = _gate(tmp_path, [_nic()], policy_of)
    pdf = write_pdf(result.files["report.html"])
    text = subprocess.run([pdftotext, "-layout", str(pdf), "-"], capture_output=True, text=True, check=True)
    words = " ".join(text.stdout.split())
    assert "Worst class pooled over its cells: class 'bolt' at 0.5000 (15 / 30 over 2 cells" in words
    assert "Per class, pooled over its cells (lowest first)" in words
    assert "bolt 0.5000 15 / 30 2 bolt @ night 0.4000" in words


# ---------------------------------------------------------------------- junit.xml, fmeca.csv: contracts
def _structure(xml: str) -> list[tuple[str, dict]]:
    """Every element's tag and attributes, in document order: the JUnit contract (texts left out)."""
    import xml.etree.ElementTree as ET

    return [(el.tag, dict(el.attrib)) for el in ET.fromstring(xml.split("\n", 1)[1]).iter()]


def test_junit_of_an_ni_decision_says_cell_in_its_wording_only(policy_of):
    from clgate.reports import render_junit

    decision = gate_logs([_ni()], policy_of(*RULES)).decision
    as_nc = decision.model_copy(
        update={"headline": decision.headline.model_copy(update={"pooled_classes": None})}
    )
    ni, nc = render_junit(decision, timestamp=WHEN), render_junit(as_nc, timestamp=WHEN)
    assert _structure(ni) == _structure(nc)  # same elements, same attributes (messages included)
    assert ni != nc and "cell 'cat @ night' = class 'cat' on sample group 'night'" in ni
    assert "names a cell" not in nc


def test_junit_of_an_nc_decision_is_byte_identical_to_before_the_ni_wording(forgetful_log, policy_of):
    """golden/junit-nc.xml was rendered before junit.xml knew NI/NIC decisions."""
    from clgate.reports import render_junit

    rules = [{"metric": "acc", "floor": 0.8}, {"classes": "*", "at": "final", "floor": 0.5}]
    policy = policy_of(*rules).model_copy(update={"name": "p"})
    decision = gate_logs([forgetful_log(seed=3)], policy).decision
    assert render_junit(decision, timestamp=WHEN) == (GOLDEN / "junit-nc.xml").read_text(encoding="utf-8")


def test_fmeca_csv_keeps_its_columns_for_an_ni_decision(policy_of):
    """The columns are a contract: an NI/NIC row's class_name holds the cell, its failure mode says which
    class in which group."""
    from clgate.reports.fmeca_csv import FMECA_COLUMNS, fmeca_csv

    policy = policy_of(*RULES, fmeca={"default_severity": 6, "default_detection": 4})
    rows = fmeca_csv(gate_logs([_ni()], policy).decision.fmeca).splitlines()
    assert rows[0].split(",") == FMECA_COLUMNS
    by_cell = {r.split(",")[2]: r.split(",")[4] for r in rows[1:]}
    assert by_cell["cat @ night"] == "class cat misclassified in group night"

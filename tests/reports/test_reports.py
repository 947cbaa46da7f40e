"""Reports: HTML in a real headless Chromium, JUnit through a JUnit reader, Markdown against a golden file."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from clgate.gate import gate_logs
from clgate.reports import REPORT_FILES, fmeca_csv, render_junit, render_markdown

GOLDEN = Path(__file__).parent / "golden"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

RULES = [
    {"metric": "acc", "floor": 0.8},
    {"metric": "mica", "at": "worst", "floor": 0.7, "id": "worst-class"},
    {"metric": "min_class_acc", "floor": 0.25, "severity": "warn"},
    {"metric": "wf10", "ceiling": 0.5, "severity": "warn"},
    {"classes": ["bee", "cat"], "at": "min_after_learned", "floor": 0.8},
    {"fmeca": "rpn", "limit": 500},
    {"baseline": "mica", "max_drop": 0.1},
]


@pytest.fixture
def gated(tmp_path, forgetful_log, policy_of):
    policy = policy_of(*RULES, fmeca={"default_severity": 6, "severity": {"ant": 9}, "default_detection": 4})
    return gate_logs([forgetful_log(seed=3)], policy, out_dir=tmp_path / "out",
                     provenance={"test": "reports"})


def test_all_files_written(gated):
    assert set(gated.files) == set(REPORT_FILES)
    assert json.loads(gated.files["decision.json"].read_text())["verdict"] == "ERROR"  # no baseline given
    metrics = json.loads(gated.files["metrics.json"].read_text())
    assert metrics["runs"]["runs"][0]["metrics"]["mica"][-1] == pytest.approx(0.5)


def test_junit_parsed_by_a_junit_reader(gated):
    from junitparser import Error, Failure, JUnitXml

    xml = JUnitXml.fromfile(str(gated.files["junit.xml"]))
    suites = list(xml)
    assert len(suites) == 1
    suite = suites[0]
    cases = list(suite)
    assert len(cases) == len(RULES)
    by_name = {c.name: c for c in cases}
    failed = by_name["rules[1] worst-class"]
    assert any(isinstance(r, Failure) for r in failed.result)
    warned = by_name["rules[2] min_class_acc >= 0.25"]
    assert not any(isinstance(r, (Failure, Error)) for r in warned.result)
    assert "WARN:" in (warned.system_out or "")
    errored = by_name["rules[6] baseline mica drop <= 0.1"]
    assert any(isinstance(r, Error) for r in errored.result)
    passed = by_name["rules[0] acc >= 0.8"]
    assert passed.is_passed and "PASS:" in passed.system_out
    assert suite.failures == sum(r.status == "fail" for r in gated.decision.rules)
    assert suite.errors == 1
    props = {p.name: p.value for p in suite.properties()}
    assert props["verdict"] == "ERROR" and "min_class_acc >= 0.25" in props["warnings"]


def test_junit_warn_is_not_a_failure(forgetful_log, policy_of):
    from junitparser import JUnitXml

    d = gate_logs([forgetful_log()], policy_of({"metric": "mica", "floor": 0.9, "severity": "warn"})).decision
    assert d.verdict == "WARN"
    xml = JUnitXml.fromstring(render_junit(d))
    case = next(iter(next(iter(xml))))
    assert case.is_passed and case.system_out.startswith("WARN:")


def test_markdown_is_stable_golden(gated):
    text = render_markdown(gated.decision)
    assert text == render_markdown(gated.decision.model_copy(deep=True))
    golden = GOLDEN / "report.md"
    if os.environ.get("CLGATE_REGEN_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    assert gated.files["report.md"].read_text(encoding="utf-8") == text


def test_fmeca_csv_rows_in_worksheet_order(gated):
    rows = list(csv.DictReader(io.StringIO(fmeca_csv(gated.decision.fmeca))))
    assert len(rows) == 6
    assert rows[0]["class_name"] == "ant" and rows[0]["priority_worst"] == "High"
    assert [int(r["rank"]) for r in rows] == list(range(1, 7))
    for r in rows:
        assert int(r["RPN_worst"]) == int(r["S"]) * int(r["O_worst"]) * int(r["D"])


def test_html_renders_in_headless_chromium(gated, require_binary, artifacts_dir):
    chromium = require_binary("chromium")
    from playwright.sync_api import sync_playwright

    html_path = gated.files["report.html"]
    html = html_path.read_text(encoding="utf-8")
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html  # self-contained
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(html_path.as_uri())
            page.wait_for_load_state("load")
            assert page.inner_text("#verdict") == "ERROR"
            # decision and rule table come first
            order = page.evaluate("[...document.querySelectorAll('section, header')].map(e => e.id)")
            assert order[:3] == ["decision", "rules", "headline"]
            assert page.locator("#rules tbody tr").count() == len(RULES)
            for fig in ("fig-acc-mica", "fig-boxplots", "fig-stability-gap", "fig-raa-raf"):
                svg = page.locator(f"#{fig} svg")
                assert svg.count() == 1, fig
                box = svg.bounding_box()
                assert box and box["width"] > 300 and box["height"] > 150, fig
            # the stability-gap figure marks the minimum after learned of each old task
            assert page.locator("#fig-stability-gap [id^='min-acc-']").count() == 2
            assert page.locator("#fig-stability-gap [id^='task-curve-']").count() == 3
            assert page.locator("#fmeca-table tbody tr").count() == 6
            assert page.locator("#criticality-matrix tbody tr").count() == 10
            page.screenshot(path=str(artifacts_dir / "gate-report.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert all(u.startswith(("file://", "data:")) for u in requests), requests
    assert (artifacts_dir / "gate-report.png").stat().st_size > 10_000


def test_html_for_invalid_inputs_still_renders(tmp_path, good_log, build_log, policy_of):
    other = build_log([(1, True, [0.9, 0.9])], tasks=[[0, 1]], names=["x", "y"])
    res = gate_logs([good_log(), other], policy_of({"metric": "acc", "floor": 0.5}), out_dir=tmp_path)
    html = res.files["report.html"].read_text(encoding="utf-8")
    assert res.verdict == "ERROR" and "No metrics: the inputs were invalid" in html and "<svg" not in html

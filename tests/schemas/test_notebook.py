"""Decisions, gate results and metrics results render themselves in Jupyter (``_repr_html_``, parsed
here with html.parser for the verdict, the worst class at its worst moment and the heatmap) and become
pandas data frames."""

from __future__ import annotations

from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from clgate.documents import load_log
from clgate.gate import gate_logs
from clgate.policy import parse_policy
from clgate.schemas.notebook import heat_colour
from tests.fixtures.service import REPO

LOG = REPO / "examples" / "logs" / "spec-example.json"


class Elements(HTMLParser):
    """The text of each element with a class, by class name, and each heatmap cell's style."""

    def __init__(self, document: str) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.attrs_of: dict[str, dict] = {}
        self.cells: list[tuple[str, str]] = []
        self._open: list[str] = []
        self.feed(document)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        name = attrs.get("class") or ""
        self._open.append(name)
        if name:
            self.attrs_of.setdefault(name, attrs)
            self.text.setdefault(name, "")
        if name == "clgate-cell":
            self.cells.append((attrs["style"], ""))

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for name in self._open:
            if name:
                self.text[name] += data
        if self._open and self._open[-1] == "clgate-cell":
            style, _ = self.cells[-1]
            self.cells[-1] = (style, data)


@pytest.fixture(scope="module")
def result():
    policy = parse_policy({"name": "nb", "version": "1", "rules": [{"metric": "mica", "floor": 0.5}]})
    return gate_logs([load_log(LOG)], policy)


def test_gate_result_html_has_verdict_worst_moment_and_heatmap(result):
    page = Elements(result._repr_html_())
    assert page.attrs_of["clgate-verdict"]["data-verdict"] == result.verdict == "FAIL"
    assert page.text["clgate-verdict"] == "FAIL"
    w = result.decision.headline.worst_moment
    moment = page.text["clgate-worst-moment"]
    assert w.class_name in moment and f"task {w.task}" in moment and f"{100 * w.accuracy:.1f} %" in moment
    assert "clgate-heatmap" in page.text and "clgate-rules" in page.text
    classes = result.metrics.runs[0].classes
    for c in classes:  # every class's final accuracy is a cell of the heatmap, coloured by its value
        style = dict((t, s) for s, t in page.cells)[f"{100 * c.final_accuracy:.1f} %"]
        assert style.endswith(f"background:{heat_colour(c.final_accuracy)}")
    assert heat_colour(0.1) != heat_colour(0.9)


def test_decision_and_metrics_render_alone(result):
    decision_page = Elements(result.decision._repr_html_())
    assert decision_page.text["clgate-verdict"] == "FAIL" and decision_page.cells  # worst classes heatmap
    metrics_page = Elements(result.metrics._repr_html_())
    assert "clgate-heatmap" in metrics_page.text and "clgate-worst-moment" in metrics_page.text
    run_page = Elements(result.metrics.runs[0]._repr_html_())
    assert run_page.text["clgate-worst-moment"] == metrics_page.text["clgate-worst-moment"]


def test_text_is_escaped(result):
    hostile = result.decision.model_copy(update={"summary": "<script>alert(1)</script>"})
    assert "<script>" not in hostile._repr_html_() and "&lt;script&gt;" in hostile._repr_html_()


def test_to_frame(result):
    pd = pytest.importorskip("pandas")
    rules = result.to_frame()
    assert isinstance(rules, pd.DataFrame) and list(rules["status"]) == [
        r.status for r in result.decision.rules
    ]
    metrics = result.metrics.runs[0].to_pandas()
    acc = metrics[metrics.metric == "acc"]
    assert list(acc.task) == [1, 2, 3] and list(acc.value) == pytest.approx(
        result.metrics.runs[0].metrics["acc"]
    )
    assert metrics[(metrics.metric == "wamica")].task.isna().all()


# ---------------------------------------------------------------------- NC unchanged, NI/NIC cells
GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize(
    ("name", "view"),
    [
        pytest.param("notebook-nc-decision.html", lambda r: r.decision._repr_html_(), id="decision"),
        pytest.param("notebook-nc-gate.html", lambda r: r._repr_html_(), id="gate-result"),
        pytest.param("notebook-nc-metrics.html", lambda r: r.metrics._repr_html_(), id="metrics"),
    ],
)
def test_nc_views_are_byte_for_byte_as_before(result, name, view):
    """Written by the notebook view before it knew NI/NIC logs: an NC log's HTML has not moved."""
    assert view(result) + "\n" == (GOLDEN / name).read_text(encoding="utf-8")
    assert "cell" not in view(result).replace("clgate-cell", "")


@pytest.fixture(scope="module")
def ni_result():
    from tests.reports.test_ni_reports import _ni

    policy = parse_policy({"name": "nb", "version": "1", "rules": [{"metric": "mica", "floor": 0.5}]})
    return gate_logs([_ni()], policy)  # cat 7/10 by day, 6/10 by night; dog 8/10, 9/10


def test_ni_decision_names_cells_and_the_worst_pooled_class(ni_result):
    for page in (Elements(ni_result.decision._repr_html_()), Elements(ni_result._repr_html_())):
        w = ni_result.decision.headline.worst_moment
        assert page.text["clgate-worst-moment"].startswith(
            f"Worst cell at its worst moment: {w.class_name} (cell "
        )
        assert w.class_name in {"cat @ day", "cat @ night", "dog @ day", "dog @ night"}  # a cell's name
        assert page.text["clgate-worst-pooled"] == (
            "Worst class pooled over its cells: cat at 65.0 % (13 / 20 over 2 cells; "
            "its worst cell cat @ night at 60.0 %)"
        )
    alone = ni_result.decision._repr_html_()
    assert (
        "classes pooled over their cells: final accuracy" in alone and "worst cells: final accuracy" in alone
    )
    assert "worst classes" not in alone and "Worst class at its worst moment" not in alone


def test_ni_metrics_show_cells_and_pooled_classes(ni_result):
    for metrics in (ni_result.metrics, ni_result.metrics.runs[0]):
        html = metrics._repr_html_()
        page = Elements(html)
        c = min(
            (c for c in ni_result.metrics.runs[0].classes if c.min_after_learned is not None),
            key=lambda c: c.min_after_learned,
        )
        assert " @ " in c.name and page.text["clgate-worst-moment"].startswith(
            f"Worst cell at its worst moment: {c.name} (cell {c.id}, task {c.task}) at "
        )
        assert page.text["clgate-worst-pooled"].startswith("Worst class pooled over its cells: cat at 65.0 %")
        assert "cells (a class on one task's sample group)" in unescape(html)
        assert "classes pooled over their cells" in html and "<caption>classes</caption>" not in html
        styles = dict((t, s) for s, t in page.cells)
        assert styles["65.0 %"].endswith(f"background:{heat_colour(0.65)}")  # cat, pooled
        assert styles["85.0 %"].endswith(f"background:{heat_colour(0.85)}")  # dog, pooled


def test_nic_worst_pooled_class_counts_samples_not_cells():
    from tests.reports.test_ni_reports import _nic

    policy = parse_policy({"name": "nb", "version": "1", "rules": [{"metric": "mica", "floor": 0.5}]})
    result = gate_logs([_nic()], policy)
    pooled = result.decision.headline.pooled_classes[0]
    page = Elements(result.decision._repr_html_())
    counts = f"{pooled.correct} / {pooled.total} over {len(pooled.cells)} cells"
    assert f"class pooled over its cells: {pooled.name} at" in page.text["clgate-worst-pooled"]
    assert counts in page.text["clgate-worst-pooled"]


def test_ni_decision_of_several_runs_sums_the_counts():
    from tests.reports.test_ni_reports import _ni

    policy = parse_policy({"name": "nb", "version": "1", "rules": [{"metric": "mica", "floor": 0.5}]})
    result = gate_logs([_ni(seed=0), _ni(seed=1, cat_by_day=9)], policy)  # cat 13/20, then 15/20
    page = Elements(result.decision._repr_html_())
    assert page.text["clgate-worst-pooled"].startswith(
        "Worst class pooled over its cells: cat at 70.0 % (28 / 40 (2 runs) over 2 cells"
    )

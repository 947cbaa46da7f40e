"""Metrics on NI/NIC logs (cells): the docs' worked example, C_k as distinct classes, cell names, and
comparisons only between logs over the same cells."""

from __future__ import annotations

import numpy as np
import pytest

from clgate.metrics import LogArrays, compute_metrics, compute_runs
from clgate.metrics import functional as fn
from clgate.schemas import EvaluationLog
from tests.fixtures.gate import ni_worked_example


def _worked() -> dict:
    """docs/metrics.md's worked example: cats and dogs by day (task 1), then by night (task 2)."""
    return ni_worked_example()


def _approx(values: list) -> list:
    return [None if v is None else pytest.approx(v) for v in values]


def test_the_docs_worked_example():
    m = compute_metrics(EvaluationLog.parse(_worked()))
    assert m.metrics["acc"] == _approx([0.85, 0.75])
    assert m.metrics["mica"] == _approx([0.8, 0.6])
    assert m.metrics["mica_old"] == _approx([None, 0.7])
    assert m.metrics["af"] == _approx([None, 0.10])
    assert m.metrics["forg"] == _approx([None, 0.10])
    assert m.metrics["bwt"] == pytest.approx(-0.10)
    assert m.metrics["raa"] == _approx([0.85, 0.75])  # C_k = 2, 2 (classes), not 2, 4 (cells)
    assert (
        m.metrics["raf"] == [None, None] and "no task after the first brings a new class" in m.reasons["raf"]
    )
    assert [e["class_name"] for e in m.evidence["mica"]] == ["dog @ day", "cat @ night"]
    assert [c.name for c in m.classes] == ["cat @ day", "dog @ day", "cat @ night", "dog @ night"]
    assert [c.final_accuracy for c in m.classes] == _approx([0.7, 0.8, 0.6, 0.9])


def test_the_same_counts_read_as_nc_rescale_by_cells():
    """The C_k change is what differs: the same numbers as an NC log of 4 classes give raa = acc·C_k/C_K."""
    doc = _worked()
    for key in ("scenario", "class_of", "groups", "class_names"):
        doc.pop(key)
    m = compute_metrics(EvaluationLog.parse(doc))
    assert m.metrics["acc"] == _approx([0.85, 0.75])
    assert m.metrics["raa"] == _approx([0.85 * 2 / 4, 0.75])
    assert m.metrics["raf"][1] is not None


def test_nic_c_k_counts_distinct_classes():
    # task 1: classes 0, 1 (group a); task 2: classes 0, 1, 2 (group b); task 3: class 2 (group a)
    log = EvaluationLog.parse(
        {
            "scenario": "nic",
            "class_of": [0, 1, 0, 1, 2, 2],
            "groups": ["a", "b", "a"],
            "tasks": [[0, 1], [2, 3, 4], [5]],
            "points": [
                {"iteration": 1, "task": 1, "task_end": True, "accuracy": [0.9, 0.8, None, None, None, None]},
                {"iteration": 2, "task": 2, "task_end": True, "accuracy": [0.8, 0.7, 0.6, 0.5, 0.4, None]},
                {"iteration": 3, "task": 3, "task_end": True, "accuracy": [0.7, 0.6, 0.5, 0.4, 0.3, 0.2]},
            ],
        }
    )
    a = LogArrays.from_log(log)
    assert a.classes_seen.tolist() == [2, 3, 3] and a.task_sizes.tolist() == [2, 3, 1]
    m = compute_metrics(log)
    acc = m.metrics["acc"]
    assert m.metrics["raa"] == _approx([acc[0] * 2 / 3, acc[1], acc[2]])
    rand = fn.random_forgetting(np.array([2, 1, 0]))
    assert rand[1] > 0 and rand[2] > 0  # defined where an earlier task saw fewer classes
    assert all(v is not None for v in m.metrics["raf"][1:])
    assert a.class_names[4] == "2 @ b"


def test_a_baseline_over_other_cells_is_refused():
    log = EvaluationLog.parse(_worked())
    nc = _worked()
    for key in ("scenario", "class_of", "groups"):
        nc.pop(key)
    nc["class_names"] = ["cat @ day", "dog @ day", "cat @ night", "dog @ night"]  # the same names, not cells
    with pytest.raises(ValueError, match="baseline: its scenario or class_of differs"):
        compute_metrics(log, baseline=EvaluationLog.parse(nc))
    with pytest.raises(ValueError, match=r"logs\[1\]: its scenario or class_of differs"):
        compute_runs([log, EvaluationLog.parse(nc)])
    same = compute_metrics(log, baseline=log)
    assert same.metrics["class_regression"] == pytest.approx(0.0)


def test_nc_logs_serialise_as_before():
    doc = _worked()
    for key in ("scenario", "class_of", "groups", "class_names"):
        doc.pop(key)
    text = EvaluationLog.parse(doc).model_dump_json()
    assert '"scenario"' not in text and '"class_of"' not in text and '"groups"' not in text
    assert EvaluationLog.parse({**doc, "scenario": "nc"}).model_dump_json() == text
    ni = EvaluationLog.parse(_worked())
    assert EvaluationLog.parse(ni.model_dump_json()) == ni


def test_a_class_rule_and_an_fmeca_rating_by_class_name_cover_every_cell():
    from clgate.fmeca import build_worksheet
    from clgate.policy import decide, parse_policy

    log = EvaluationLog.parse(_worked())
    policy = parse_policy(
        {
            "name": "cats",
            "rules": [{"classes": ["cat"], "at": "final", "floor": 0.65}],
            "fmeca": {"default_severity": 5, "severity": {"cat": 9}, "default_detection": 5},
        }
    )
    d = decide([log], policy)
    assert d.verdict == "FAIL"  # cat @ night reads 0.6 < 0.65; cat @ day (0.7) passes
    assert "cat @ night" in d.rules[0].message and "cat @ day" not in d.rules[0].message
    rows = {r.class_name: r for r in build_worksheet([compute_metrics(log)], policy.fmeca).rows}
    assert rows["cat @ night"].severity == 9 and rows["dog @ night"].severity == 5
    stats = compute_metrics(log).classes
    assert (stats[2].of_class, stats[2].group) == ("cat", "night") and stats[0].of_class == "cat"


def test_a_bare_number_in_a_class_rule_of_an_ni_log_is_refused_not_read_as_a_cell():
    from clgate.policy import decide, parse_policy

    log = EvaluationLog.parse(_worked())
    by_number = parse_policy({"name": "n", "rules": [{"classes": [0], "at": "final", "floor": 0.1}]})
    d = decide([log], by_number)
    assert d.verdict == "ERROR"
    assert "named, not numbered" in d.rules[0].message
    by_name = parse_policy({"name": "n", "rules": [{"classes": ["cat"], "at": "final", "floor": 0.1}]})
    assert decide([log], by_name).verdict == "PASS"


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".npz"])
def test_every_log_file_form_keeps_the_cells(tmp_path, suffix):
    from clgate.logfile import read_log, write_log
    from clgate.policy import log_hash

    log = EvaluationLog.parse(_worked())
    path = tmp_path / f"log{suffix}"
    write_log(log, path, format=suffix[1:])
    a = read_log(path)
    assert a.scenario == "ni" and a.class_of.tolist() == [0, 1, 0, 1] and a.classes_seen.tolist() == [2, 2]
    assert a.class_names == ["cat @ day", "dog @ day", "cat @ night", "dog @ night"]
    assert log_hash(a) == log_hash(log)
    assert compute_metrics(a).metrics["raa"] == compute_metrics(log).metrics["raa"]


def test_the_pooled_view_sums_a_class_over_its_groups_and_nc_results_read_as_before():
    m = compute_metrics(EvaluationLog.parse(_worked()))
    assert [(p.name, p.final_correct, p.final_total) for p in m.pooled_classes] == [
        ("cat", 13, 20),
        ("dog", 17, 20),
    ]
    assert m.pooled_classes[0].cells == ["cat @ day", "cat @ night"]
    assert m.pooled_classes[0].final_accuracy == pytest.approx(0.65)  # the cell view's worst cat: 0.6
    doc = _worked()
    for key in ("scenario", "class_of", "groups"):
        doc.pop(key)
    doc["class_names"] = ["a", "b", "c", "d"]
    text = compute_metrics(EvaluationLog.parse(doc)).model_dump_json()
    assert "pooled_classes" not in text and "of_class" not in text and '"group"' not in text

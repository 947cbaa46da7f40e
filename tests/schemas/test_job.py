"""The job specification: YAML/JSON, overrides, errors that name the field and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clgate.documents import dump_job, load_job, parse_job, parse_overrides
from clgate.schemas.job import CheckpointSpec, JobSpec, JobSpecError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def test_shipped_examples_load():
    names = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    assert {"digits-er.yaml", "digits-finetune.yaml"} <= set(names)
    for path in EXAMPLES.glob("*.yaml"):
        spec = load_job(path)
        assert spec.mode == "retrain" and spec.data.kind == "digits"
    er = load_job(EXAMPLES / "digits-er.yaml")
    assert er.strategy.name == "er" and er.strategy.params["mem_size"] == 200


def test_yaml_and_json_round_trip(tmp_path):
    # a null that is not the default must survive dump/load and overrides
    spec = load_job(EXAMPLES / "digits-er.yaml").with_overrides(
        parse_overrides(["evaluation.eval_every=null"])
    )
    assert spec.with_overrides(parse_overrides(["training.epochs=1"])).evaluation.eval_every is None
    for name in ("job.json", "job.yaml"):
        dump_job(spec, tmp_path / name)
        assert load_job(tmp_path / name) == spec


def test_overrides_with_dotted_keys_and_yaml_values():
    spec = load_job(EXAMPLES / "digits-finetune.yaml")
    out = spec.with_overrides(
        parse_overrides(
            [
                "strategy.name=er",
                "strategy.mem_size=50",
                "training.epochs=2",
                "seeds=[0,1,2]",
                "evaluation.eval_every=null",
                "device=cpu",
                "scenario.tasks=[[0,1,2],[3,4,5,6,7,8,9]]",
                "scenario.n_tasks=null",
            ]
        )
    )
    assert out.strategy.name == "er" and out.strategy.params == {"mem_size": 50}
    assert out.training.epochs == 2 and out.seeds == [0, 1, 2] and out.evaluation.eval_every is None
    assert out.scenario.tasks == [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9]]
    assert spec.training.epochs == 5  # the original is unchanged
    assert spec.with_overrides({"data": {"kind": "synthetic", "n_classes": 4}}).data.kind == "synthetic"


@pytest.mark.parametrize(
    "document,problem",
    [
        pytest.param({"scenario": {"n_tasks": 5}}, "data: Field required", id="missing-data"),
        pytest.param({"data": "digits"}, "scenario: Field required", id="missing-scenario"),
        pytest.param(
            {"data": "csv", "scenario": {"n_tasks": 2}},
            "data: Input tag 'csv' found using 'kind' does not match",
            id="unknown-data-kind",
        ),
        pytest.param(
            {"data": {"kind": "npz"}, "scenario": {"n_tasks": 2}},
            "data.path: Field required",
            id="npz-needs-path",
        ),
        pytest.param(
            {"data": "digits", "scenario": {}}, "scenario: give n_tasks (equal tasks) or tasks", id="no-split"
        ),
        pytest.param(
            {"data": "digits", "scenario": {"tasks": [[0], [0, 1]]}},
            "scenario: tasks: a class appears in more than one task",
            id="overlap",
        ),
        pytest.param(
            {"data": "digits", "scenario": {"n_tasks": 2}, "training": {"batch_size": 0}},
            "training.batch_size: Input should be greater than or equal to 1",
            id="batch-size",
        ),
        pytest.param(
            {"data": "digits", "scenario": {"n_tasks": 2}, "training": {"optimiser": "sgd"}},
            "training.optimiser: Extra inputs are not permitted",
            id="typo-field",
        ),
        pytest.param(
            {"data": "digits", "scenario": {"n_tasks": 2}, "device": "gpu"},
            "device: 'gpu' is not a device",
            id="device",
        ),
        pytest.param(
            {"data": "digits", "scenario": {"n_tasks": 2}, "seeds": [1, 1]},
            "seeds: Value error, seeds must be distinct",
            id="seeds",
        ),
        pytest.param(
            {"data": "digits", "scenario": {"n_tasks": 2}, "mode": "evaluate"},
            "checkpoints: evaluate mode needs at least one checkpoint",
            id="evaluate-needs-checkpoints",
        ),
        pytest.param(
            {"data": "digits", "scenario": {"n_tasks": 2}, "model": {"weights": "w.safetensors"}},
            "model: weights need arch",
            id="weights-need-arch",
        ),
        pytest.param(
            {"data": "digits", "scenario": {"n_tasks": 2}, "model": {"arch": "vit"}},
            "model.arch: Input should be 'mlp', 'cnn' or 'resnet18-slim'",
            id="arch",
        ),
    ],
)
def test_errors_name_field_and_reason(document, problem):
    with pytest.raises(JobSpecError) as info:
        parse_job(document, source="job.yaml")
    text = str(info.value)
    assert text.startswith("job.yaml: invalid job specification")
    assert any(line.startswith(problem.split(":")[0] + ":") for line in info.value.problems)
    assert problem.replace("Value error, ", "") in text


def test_load_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed")
    with pytest.raises(JobSpecError, match="not valid YAML"):
        load_job(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(JobSpecError, match="must be a mapping"):
        load_job(bad)
    js = tmp_path / "bad.json"
    js.write_text(json.dumps({"data": "digits"}))
    with pytest.raises(JobSpecError, match="scenario: Field required"):
        load_job(js)
    with pytest.raises(JobSpecError, match="cannot read file"):
        load_job(tmp_path / "missing.yaml")
    spec = load_job(EXAMPLES / "digits-er.yaml")
    with pytest.raises(JobSpecError, match="expected key=value"):
        spec.with_overrides(parse_overrides(["training.epochs"]))
    with pytest.raises(JobSpecError, match=r"training\.epochs: Input should be a valid integer"):
        spec.with_overrides(parse_overrides(["training.epochs=many"]))


def test_checkpoint_syntax():
    assert CheckpointSpec.model_validate("a/b.pt@120:3") == CheckpointSpec(
        path="a/b.pt", iteration=120, task=3
    )
    assert CheckpointSpec.model_validate("x@y.pt") == CheckpointSpec(path="x@y.pt")
    spec = JobSpec.parse(
        {"data": "digits", "scenario": {"n_tasks": 2}, "mode": "evaluate", "checkpoints": ["a.pt", "b.pt@7"]}
    )
    assert [c.iteration for c in spec.checkpoints] == [None, 7]


def test_json_schema_is_generated():
    schema = JobSpec.model_json_schema()
    assert {"data", "scenario", "model", "strategy", "training", "evaluation", "seeds", "device"} <= set(
        schema["properties"]
    )

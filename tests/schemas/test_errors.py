"""The one error base (InputError) and the one ``field: reason`` formatter (problems_of)."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clgate.policy import PolicyError, parse_policy
from clgate.schemas.errors import InputError, loc_to_path, problems_of
from clgate.schemas.evaluation_log import EvaluationLog, EvaluationLogError
from clgate.schemas.job import JobSpec, JobSpecError


class _A(BaseModel):
    kind: Literal["a"] = "a"
    size: Annotated[int, Field(ge=1)]


class _B(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["b"] = "b"
    a: int = 0


class _Doc(BaseModel):
    items: list[Annotated[_A | _B, Field(discriminator="kind")]] = []
    a: Annotated[_A | _B, Field(discriminator="kind")] | None = None
    n: int = 0


def _errors(data: dict) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        _Doc.model_validate(data)
    return info.value


def test_paths_prefix_and_messages():
    exc = _errors({"n": "x", "items": [{"kind": "a", "size": 0}]})
    assert problems_of(exc) == [
        "items[0].a.size: Input should be greater than or equal to 1",
        "n: Input should be a valid integer, unable to parse string as an integer",
    ]
    assert problems_of(exc, prefix="doc")[1].startswith("doc.n: ")
    assert problems_of(exc, messages={"int_parsing": "{field} is not a number ({input!r})"})[1] == (
        "n: n is not a number ('x')"
    )
    assert loc_to_path(("points", 12, "correct", 3)) == "points[12].correct[3]"
    as_list = [{"loc": ("body", "mode"), "msg": "Value error, bad mode", "type": "value_error"}]
    assert problems_of(as_list) == ["body.mode: bad mode"]


def test_union_tags_are_left_out_but_a_field_named_like_a_tag_is_kept():
    exc = _errors(
        {"items": [{"kind": "a", "size": 0}, {"kind": "b", "a": "x"}], "a": {"kind": "a", "size": 0}}
    )
    assert problems_of(exc, tags={"items": ("a", "b"), "a": ("a", "b")}) == [
        "items[0].size: Input should be greater than or equal to 1",
        "items[1].a: Input should be a valid integer, unable to parse string as an integer",
        "a.size: Input should be greater than or equal to 1",
    ]


def test_a_model_level_error_gives_its_own_lines():
    class Checked(BaseModel):
        x: int = 0

        def model_post_init(self, _context: object) -> None:
            raise ValueError("x: first\ny: second")

    with pytest.raises(ValidationError) as info:
        Checked()
    assert problems_of(info.value) == ["x: first", "y: second"]


def test_input_error_message_and_subclasses():
    err = InputError(["a: bad"], "f.yaml", what="thing")
    assert (
        str(err) == "f.yaml: invalid thing\n  a: bad"
        and err.problems == ["a: bad"]
        and err.source == "f.yaml"
    )
    assert str(InputError("plain message\nsecond line")) == "plain message\nsecond line"
    assert InputError("plain message\nsecond line").problems == ["plain message", "second line"]
    assert InputError([]).problems == ["invalid input"]
    for cls in (EvaluationLogError, JobSpecError, PolicyError):
        assert issubclass(cls, InputError) and issubclass(cls, ValueError)


def test_the_library_errors_carry_problems_from_the_one_formatter():
    with pytest.raises(EvaluationLogError) as log_err:
        EvaluationLog.parse(
            {"tasks": [[0]], "points": [{"iteration": -1, "task": 1, "accuracy": [0.5]}]}, "x.json"
        )
    assert "points[0].iteration: Input should be greater than or equal to 0" in log_err.value.problems
    assert str(log_err.value).startswith("x.json: invalid evaluation log\n  ")
    with pytest.raises(JobSpecError) as job_err:
        JobSpec.parse({"data": {"kind": "synthetic", "n_classes": 1}})
    assert "data.n_classes: Input should be greater than or equal to 2" in job_err.value.problems
    with pytest.raises(PolicyError) as policy_err:
        parse_policy({"name": "p", "rules": [{"metric": "acc", "floor": "high"}]})
    assert any(p.startswith("rules[0].floor: ") for p in policy_err.value.problems), policy_err.value.problems


def test_engine_errors_are_input_errors():
    pytest.importorskip("torch")
    from clgate.engine.errors import DataError, EngineInputError, StrategyError

    assert issubclass(DataError, EngineInputError) and issubclass(EngineInputError, InputError)
    assert str(DataError("data.path: no such file")) == "data.path: no such file"
    assert issubclass(StrategyError, InputError)


def test_documents_are_read_parsed_and_validated_with_the_callers_error(tmp_path):
    from clgate.documents import parse_document, read_text
    from clgate.schemas.errors import validate

    class DocError(InputError):
        what = "doc"

    with pytest.raises(DocError, match="cannot read file") as missing:
        read_text(tmp_path / "absent.yaml", DocError)
    assert missing.value.source == str(tmp_path / "absent.yaml")
    assert parse_document("n: 2", DocError, fields="(n)") == {"n": 2}
    with pytest.raises(DocError) as not_json:
        parse_document("n: 2", DocError, syntax="JSON", fields="(n)")
    assert not_json.value.problems[0].startswith("not valid JSON: ")
    with pytest.raises(DocError) as listed:
        parse_document("- 1\n- 2\n", DocError, source="d.yaml", fields="(n)")
    assert listed.value.problems == ["the document must be a mapping (n)"] and listed.value.source == "d.yaml"
    with pytest.raises(DocError) as bad:
        validate(_Doc, {"n": "x"}, DocError, source="d.yaml")
    assert bad.value.problems == ["n: Input should be a valid integer, unable to parse string as an integer"]
    assert validate(_Doc, {"n": 3}, DocError).n == 3

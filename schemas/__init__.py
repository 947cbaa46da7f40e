"""The contract: pydantic v2 models for everything that crosses a boundary in clgate."""

from clgate.schemas.evaluation_log import (
    FORMAT as EVALUATION_LOG_FORMAT,
    EvalPoint,
    EvaluationLog,
    EvaluationLogError,
    TaskResources,
    format_validation_error,
    loc_to_path,
)

__all__ = [
    "EVALUATION_LOG_FORMAT",
    "EvalPoint",
    "EvaluationLog",
    "EvaluationLogError",
    "TaskResources",
    "format_validation_error",
    "loc_to_path",
]

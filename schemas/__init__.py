"""The contract: pydantic v2 models for everything that crosses a boundary in clgate."""

from clgate.schemas.errors import InputError, loc_to_path, problems_of
from clgate.schemas.evaluation_log import (
    FORMAT as EVALUATION_LOG_FORMAT,
)
from clgate.schemas.evaluation_log import (
    EvalPoint,
    EvaluationLog,
    EvaluationLogError,
    TaskResources,
)

__all__ = [
    "EVALUATION_LOG_FORMAT",
    "EvalPoint",
    "EvaluationLog",
    "EvaluationLogError",
    "InputError",
    "TaskResources",
    "loc_to_path",
    "problems_of",
]

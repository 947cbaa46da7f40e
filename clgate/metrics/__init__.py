"""clgate metrics: every metric of ``docs/metrics.md``, exact, vectorised, explained.

Start from :func:`compute_metrics` (one log) or :func:`compute_runs` (several seeds); the registry
(:data:`REGISTRY`, :func:`metric_info`) says what each id means; :class:`LogArrays` holds the tensors
derived once from a log; :mod:`clgate.metrics.functional` has each metric as a pure numpy function.

>>> from pathlib import Path
>>> from clgate.documents import load_log
>>> log = load_log(Path(__file__).parents[2] / "examples" / "logs" / "spec-example.json")
>>> m = compute_metrics(log)
>>> m.metrics["mica"], m.evidence["mica"][2]["class_name"]
([0.9, 0.5, 0.36], 'scratch')
"""

from clgate.metrics.arrays import LogArrays, task_accuracy_matrix, wilson_interval
from clgate.metrics.compute import compute_metrics, compute_runs
from clgate.metrics.functional import (
    average_accuracy,
    average_forgetting,
    backward_transfer,
    cl_score,
    cl_stability,
    class_minima_after_learning,
    class_regression,
    computational_efficiency,
    first_point_of_minimum,
    forgetting,
    lifetime_accuracy,
    lifetime_backward_transfer,
    lifetime_forward_transfer,
    min_accuracy,
    minimal_class_accuracy,
    model_size_efficiency,
    random_forgetting,
    rescaled_average_accuracy,
    rescaled_average_forgetting,
    running_min_after,
    samples_storage_efficiency,
    wamica,
    windowed_extremes,
    worst_case_accuracy_curve,
)
from clgate.metrics.registry import (
    CL_CRITERIA,
    REGISTRY,
    WINDOWED,
    MetricInfo,
    metric_ids,
    metric_info,
)

__all__ = [
    "CL_CRITERIA",
    "REGISTRY",
    "WINDOWED",
    "LogArrays",
    "MetricInfo",
    "average_accuracy",
    "average_forgetting",
    "backward_transfer",
    "cl_score",
    "cl_stability",
    "class_minima_after_learning",
    "class_regression",
    "computational_efficiency",
    "compute_metrics",
    "compute_runs",
    "first_point_of_minimum",
    "forgetting",
    "lifetime_accuracy",
    "lifetime_backward_transfer",
    "lifetime_forward_transfer",
    "metric_ids",
    "metric_info",
    "min_accuracy",
    "minimal_class_accuracy",
    "model_size_efficiency",
    "random_forgetting",
    "rescaled_average_accuracy",
    "rescaled_average_forgetting",
    "running_min_after",
    "samples_storage_efficiency",
    "task_accuracy_matrix",
    "wamica",
    "wilson_interval",
    "windowed_extremes",
    "worst_case_accuracy_curve",
]

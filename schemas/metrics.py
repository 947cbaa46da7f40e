"""Metric results as they cross boundaries (CLI ``--json``, API, policy engine, reports)."""

from __future__ import annotations

from typing import Any, Final, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from clgate.schemas.notebook import frame, metric_records, metrics_html

METRICS_FORMAT: Final = "clgate.metrics/v1"

MetricValue = float | None | list[float | None]


class ClassStats(BaseModel):
    """Where one class stands: final accuracy, its confidence bound, and its worst moment."""

    model_config = ConfigDict(extra="forbid")

    id: int
    name: str
    task: int = Field(description="1-based task that introduces the class.")
    final_accuracy: float | None = Field(description="Accuracy at the last task end (null if not reached).")
    final_correct: int | None = None
    final_total: int | None = None
    final_lcb: float | None = Field(None, description="Lower Wilson bound of final_accuracy (needs counts).")
    min_after_learned: float | None = Field(
        None, description="Lowest accuracy at any point after its own task ended (null if none)."
    )
    min_after_learned_iteration: int | None = None
    min_after_learned_lcb: float | None = None
    # NI/NIC logs only (left out of an NC log's result, which reads as it always did)
    of_class: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="NI/NIC logs: the name of the class this cell belongs to (absent: the row is a class).",
    )
    group: str | None = Field(
        None, exclude_if=lambda value: value is None, description="NI/NIC logs: the cell's sample group."
    )


class PooledClass(BaseModel):
    """NI/NIC logs: one class over the held-out samples of every group seen so far (its cells pooled)."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(description="The class id (class_of's value).")
    name: str
    cells: list[str] = Field(description="Its cells learned by the last task end, by name.")
    final_accuracy: float | None = Field(
        description="Correct / evaluated samples of those cells at the last task end (null without counts)."
    )
    final_correct: int | None = None
    final_total: int | None = None


class _NotebookViews:
    """What a notebook shows of a metrics result (one run or several): HTML and a pandas frame."""

    def _result(self) -> MetricsResult | RunsResult:
        return cast("MetricsResult | RunsResult", self)

    def _repr_html_(self) -> str:
        """Jupyter: the worst class at its worst moment, the scalar metrics, heatmaps of the accuracies."""
        return metrics_html(self._result())

    def to_frame(self) -> Any:
        """The metrics as a pandas DataFrame: a row per (metric, 1-based task) or scalar (needs pandas)."""
        return frame(metric_records(self._result()), ("metric", "task", "value"))

    def to_pandas(self) -> Any:
        """The same as :meth:`to_frame`."""
        return self.to_frame()


class MetricsResult(_NotebookViews, BaseModel):
    """All metrics of one evaluation log. ``metrics`` follows the spec's output contract."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["clgate.metrics/v1"] = METRICS_FORMAT
    metrics: dict[str, MetricValue] = Field(
        description="id → scalar, or list of K values (0-based task position), null where undefined."
    )
    reasons: dict[str, str] = Field(
        default_factory=dict, description="id → why the metric is null (needs not met)."
    )
    evidence: dict[str, list[dict | None] | dict] = Field(
        default_factory=dict,
        description=(
            "id → where the value came from: a list of K entries (null where undefined) for per-task "
            "metrics, an object for scalars. Keys: class (id), class_name, task (1-based, as in the log), "
            "point (0-based index into the log's points), iteration, value."
        ),
    )
    notes: dict[str, str] = Field(
        default_factory=dict,
        description="id (or 'partial') → caveat about a value that is computed (e.g. task-end-only logs).",
    )
    task_accuracy: Literal["macro", "micro"] = "macro"
    windows: list[int] = Field(default_factory=lambda: [10, 100])
    confidence: float = 0.95
    weights: list[float] | None = Field(
        None, description="cl_score weights over a_lifetime, rem, bwt_plus, fwt_lifetime, ms, sss, ce."
    )
    epsilon: float = Field(1.0, description="CE scaling factor ε (Díaz-Rodríguez eq. 7).")
    n_tasks: int
    n_classes: int
    finished_tasks: int
    classes: list[ClassStats] = Field(default_factory=list)
    class_deltas: list[float | None] | None = Field(
        None, description="Per-class final accuracy, candidate minus baseline (with a baseline)."
    )
    pooled_classes: list[PooledClass] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="NI/NIC logs: each class pooled over the groups seen (classes[] holds its cells).",
    )
    meta: dict = Field(default_factory=dict, description="The log's meta (seed, strategy …).")


class Aggregate(BaseModel):
    """One metric over several runs; per-task metrics aggregate element-wise."""

    mean: MetricValue
    std: MetricValue
    worst: MetricValue


class RunsResult(_NotebookViews, BaseModel):
    """Several runs (seeds) of one job: per-run results, aggregates, and ``cl_stability``."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["clgate.metrics/v1"] = METRICS_FORMAT
    metrics: dict[str, MetricValue] = Field(description="Mean over runs (plus cl_stability).")
    aggregates: dict[str, Aggregate]
    runs: list[MetricsResult]
    reasons: dict[str, str] = Field(default_factory=dict)

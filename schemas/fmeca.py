"""FMECA worksheet rows: each class is a failure mode, "class X misclassified".

S (severity) and D (detection) come from the policy — a class the policy gives no severity is
*unrated* (S, RPN and priority empty: what nobody rated is not defaulted into High or Low); O
(occurrence) from the measured error rate through the policy's occurrence scale, both for the final
error and for the worst error after the class was learned (the stability gap). RPN = S × O × D; the action
priority comes from the policy's table.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

FMECA_FORMAT: Final = "clgate.fmeca/v1"


class FmecaRow(BaseModel):
    """One failure mode."""

    model_config = ConfigDict(extra="forbid")

    class_id: int
    class_name: str
    task: int = Field(description="1-based task that introduces the class.")
    mode: str = Field(description='"class X misclassified".')
    severity: int | None = Field(description="S from the policy; none: the mode is unrated.")
    detection: int
    final_error: float | None = Field(description="1 - final accuracy (upper bound with wilson95).")
    worst_error: float | None = Field(description="1 - lowest accuracy after learned (final if none).")
    worst_iteration: int | None = None
    seed: int | str | None = Field(None, description="Seed of the run that gave the worst error.")
    occurrence_final: int
    occurrence_worst: int
    rpn_final: int | None = Field(description="S × O final × D; none when unrated.")
    rpn_worst: int | None = Field(description="S × O worst × D; none when unrated.")
    priority_final: Literal["High", "Medium", "Low"] | None = Field(description="None when unrated.")
    priority_worst: Literal["High", "Medium", "Low"] | None = Field(description="None when unrated.")

    @property
    def rated(self) -> bool:
        """Whether the policy gave this mode a severity (only rated modes have an RPN and a priority)."""
        return self.severity is not None


class FmecaWorksheet(BaseModel):
    """All failure modes, sorted by priority then RPN (worst first; unrated modes last, by worst error),
    and the S × O criticality matrix of the rated ones."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["clgate.fmeca/v1"] = FMECA_FORMAT
    rows: list[FmecaRow]
    matrix: list[list[int]] = Field(
        description="matrix[10 - S][O - 1] = number of rated modes with severity S and worst occurrence O."
    )
    unrated: int = Field(0, description="Modes without a severity (not in the matrix, no priority).")
    over_runs: Literal["mean", "worst"] = "worst"
    bound: Literal["point", "wilson95"] = "point"

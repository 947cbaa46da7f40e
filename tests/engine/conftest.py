"""Fixtures for the engine tests: small job specs and hand-computed reference metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from schemas.evaluation_log import EvaluationLog


def _digits_spec(**changes: Any):
    from schemas.job import JobSpec

    data: dict[str, Any] = {
        "data": "digits",
        "scenario": {"n_tasks": 5},
        "model": {"arch": "mlp"},
        "strategy": {"name": "finetune"},
        "training": {"lr": 0.05, "batch_size": 16, "epochs": 5},
        "evaluation": {"eval_every": 10},
        "seeds": [0],
        "device": "cpu",
    }
    spec = JobSpec.model_validate(data)
    return spec.with_overrides(changes) if changes else spec


def _synthetic_spec(**changes: Any):
    from schemas.job import JobSpec

    data: dict[str, Any] = {
        "data": {"kind": "synthetic", "n_classes": 6, "n_features": 8, "train_per_class": 30, "test_per_class": 10},
        "scenario": {"n_tasks": 3},
        "model": {"arch": "mlp", "hidden": 32},
        "training": {"lr": 0.1, "batch_size": 8, "epochs": 1},
        "evaluation": {"eval_every": 2},
        "device": "cpu",
    }
    spec = JobSpec.model_validate(data)
    return spec.with_overrides(changes) if changes else spec


@pytest.fixture
def digits_spec():
    """``digits_spec(**{"strategy.name": "er"})`` → a seeded 5×2 split-digits MLP job on the CPU."""
    return _digits_spec


@pytest.fixture
def synthetic_spec():
    """A tiny 3-task synthetic job (seconds to run)."""
    return _synthetic_spec


def _task_end_metrics(log: EvaluationLog) -> dict[str, list[float | None]]:
    """acc, mica and mica_old per task, by hand from the task-end points (macro task accuracy)."""
    out: dict[str, list[float | None]] = {"acc": [], "mica": [], "mica_old": []}
    ends = [p for p in log.points if p.task_end]
    for k, p in enumerate(ends):
        a = np.asarray(p.correct, dtype=float) / np.maximum(1, np.asarray(p.total))
        out["acc"].append(float(np.mean([np.mean(a[log.tasks[j]]) for j in range(k + 1)])))
        out["mica"].append(float(min(a[c] for j in range(k + 1) for c in log.tasks[j])))
        old = [a[c] for j in range(k) for c in log.tasks[j]]
        out["mica_old"].append(float(min(old)) if old else None)
    return out


@pytest.fixture
def hand_metrics():
    return _task_end_metrics


@pytest.fixture
def load_log():
    def load(path: Path) -> EvaluationLog:
        return EvaluationLog.load(path)

    return load

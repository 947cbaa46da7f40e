"""The job specification: one document that the CLI, the API and the workers all accept.

A job says which data, which scenario (class order, task split), which candidate model, which
strategy with its hyper-parameters, how to train (optimizer, batch size, epochs or iterations per
task), how to evaluate continually (``eval_every`` …), which seeds and which device. It is written as
YAML or JSON (read and written by :mod:`clgate.documents`); ``mode: retrain`` (the default) runs
continual retraining with continual evaluation, ``mode: evaluate`` evaluates a sequence of checkpoints.

>>> spec = JobSpec.model_validate({"data": "digits", "scenario": {"n_tasks": 5}})
>>> spec.data.kind, spec.strategy.name, spec.training.epochs, spec.seeds
('digits', 'finetune', 1, [0])
>>> spec.with_overrides({"strategy.name": "er", "strategy.mem_size": 100}).strategy.params
{'mem_size': 100}

Errors name the field and the reason (:class:`JobSpecError`, a ``ValueError``, with ``problems``):

>>> JobSpec.model_validate({"data": "digits", "scenario": {"n_tasks": 5}}).with_overrides({"training.lr": -1})
Traceback (most recent call last):
...
clgate.schemas.job.JobSpecError: invalid job specification
  training.lr: Input should be greater than 0
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from clgate.schemas.errors import InputError, validate
from clgate.schemas.vocab import EngineMode

# Bounds of a job spec: far above any continual-learning run this service is for, far below what would
# exhaust a worker (a 1e9-wide layer, 1e12 replay slots, thousands of seeds).
MAX_HIDDEN = 65_536
MAX_MEMORY_SIZE = 10_000_000
MAX_SEEDS = 100
MAX_ITERATIONS = 10_000_000
MAX_EPOCHS = 10_000
MAX_BATCH_SIZE = 65_536
MAX_IMAGE_SIDE = 4096
JOB_FORMAT: Final = "clgate.job/v1"


class JobSpecError(InputError):
    """A job specification that cannot be used; ``problems`` lists one ``field: reason`` line each."""

    what = "job specification"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# ---------------------------------------------------------------------- data
class DigitsShift(_Strict):
    """A built-in distribution shift for the digits (new-instances scenarios): the images are split into
    ``groups`` disjoint sample groups (seeded by ``seed``), and group g is transformed by g steps —
    rotated by ``g · step`` degrees (``rotation``, default step 30) or scaled in brightness by
    ``1 - g · step`` (``brightness``, default step 0.25). The groups are named ``rot0``, ``rot30`` …
    or ``bright100``, ``bright75`` …"""

    type: Literal["rotation", "brightness"]
    groups: Annotated[int, Field(ge=2, le=12)] = 3
    step: Annotated[float, Field(gt=0)] | None = None
    seed: Annotated[int, Field(ge=0)] = 0  # numpy's generators take no negative seed

    @model_validator(mode="after")
    def _check(self) -> DigitsShift:
        # a turn at most: beyond it nothing new, and g · step overflows to inf (NaN images) near 1e308
        if self.type == "rotation" and self.step is not None and self.step > 360:
            raise ValueError(f"step: at most 360 degrees (a whole turn) for rotation, got {self.step:g}")
        if self.type == "brightness" and self.step is not None and (self.groups - 1) * self.step >= 1:
            raise ValueError(
                f"step: {self.groups - 1} brightness steps of {self.step} leave no light in the last group "
                f"(give step < {1 / (self.groups - 1):.4g})"
            )
        return self


class DigitsData(_Strict):
    """scikit-learn's bundled 8×8 digits (10 classes, 1797 images); a seeded, stratified held-out split.

    ``shift`` makes sample groups of the same classes for an NI/NIC scenario (:class:`DigitsShift`).
    """

    kind: Literal["digits"] = "digits"
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2
    split_seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0  # what scikit-learn's split takes
    shift: DigitsShift | None = None


class NpzData(_Strict):
    """An ``.npz`` file with ``x_train, y_train, x_test, y_test`` and optional ``class_names``.

    Labels are integers ``0 … C-1``. uint8/uint16 images are scaled to [0, 1]; other numbers are used as
    given. ``layout`` says how 4-D images are stored: ``channels_first`` ``(N, C, H, W)`` (the default,
    PyTorch's) or ``channels_last`` ``(N, H, W, C)`` (NumPy/TensorFlow/PIL), transposed on load. A
    layout that obviously does not match the shape (``(N, 28, 28, 3)`` declared channels-first) is
    refused with the fix. 3-D images ``(N, H, W)`` are one-channel whatever the layout.
    """

    kind: Literal["npz"] = "npz"
    path: str
    layout: Literal["channels_first", "channels_last"] = "channels_first"
    groups: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)] = Field(
        "group",
        description="NI/NIC scenarios: the sample group of each sample is read from the arrays "
        "<groups>_train and <groups>_test (integers or strings), when the file has them",
    )


class ImageFolderData(_Strict):
    """``train/<class>/*`` and ``test/<class>/*`` image files, decoded with Pillow and resized when a
    batch is read (by ``workers`` processes; ``null``: the CPUs less one, at most 8)."""

    kind: Literal["image_folder"] = "image_folder"
    path: str
    grouped: bool = Field(
        False,
        description="train/<group>/<class>/* and test/<group>/<class>/*: one folder per sample group "
        "(NI/NIC scenarios)",
    )
    size: tuple[
        Annotated[int, Field(gt=0, le=MAX_IMAGE_SIDE)], Annotated[int, Field(gt=0, le=MAX_IMAGE_SIDE)]
    ] = (32, 32)
    color: Literal["L", "RGB"] = "RGB"
    workers: Annotated[int, Field(ge=0, le=64)] | None = None


class SyntheticData(_Strict):
    """Gaussian class clusters (for tests and smoke runs); deterministic for a given ``seed``."""

    kind: Literal["synthetic"] = "synthetic"
    n_classes: Annotated[int, Field(ge=2, le=10_000)] = 6
    n_features: Annotated[int, Field(ge=1, le=MAX_HIDDEN)] = 16
    train_per_class: Annotated[int, Field(ge=1, le=100_000)] = 50
    test_per_class: Annotated[int, Field(ge=1, le=100_000)] = 20
    separation: Annotated[float, Field(gt=0)] = 3.0
    seed: int = 0


DataSpec = Annotated[DigitsData | NpzData | ImageFolderData | SyntheticData, Field(discriminator="kind")]


# ---------------------------------------------------------------------- scenario
def group_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a sample group (``None`` when it can). The rule is one for the spec's
    ``groups``/``samples`` and the data's groups (an NPZ's group arrays, an image folder's group folders):
    a name the data gives must be one the spec can write, and cells are named ``<class> @ <group>`` in
    logs and reports, where control characters would forge or break lines.

    >>> group_name_problem("night"), group_name_problem("rot30")
    (None, None)
    >>> group_name_problem("a@b")
    "'a@b' is not a group name (1 to 64 characters, no '@', which separates class and group in a cell's name, no surrounding spaces, no control characters)"
    """  # noqa: E501 - the doctest output line is the exact message
    if 0 < len(name) <= 64 and "@" not in name and name == name.strip() and name.isprintable():
        return None
    return (
        f"{name[:70]!r} is not a group name (1 to 64 characters, no '@', which separates class and group "
        "in a cell's name, no surrounding spaces, no control characters)"
    )


class GroupSamples(_Strict):
    """One sample group given by hand: the positions of its samples in the training and test sets."""

    train: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    test: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)


class ScenarioSpec(_Strict):
    """Class order and task split (``type: nc``, the default), or tasks of sample groups (``ni``, ``nic``).

    NC: ``tasks`` (explicit class groups, any sizes) wins over ``class_order`` + ``n_tasks`` (equal
    tasks). Without ``class_order`` the classes are taken in label order, or shuffled with
    ``shuffle_seed`` when given. ``first_task_learned``: the candidate already knows the first task's
    classes — that task is evaluated, not trained.

    NI (new instances): task k trains on sample group ``groups[k]`` of every class (default: the data's
    groups in their order). NIC (new instances and classes): task k brings the classes ``classes[k]``
    of group ``groups[k]``; a group may come back with other classes, never with the same one twice.
    The groups come from the data (``group_train``/``group_test`` arrays of an NPZ file, a grouped
    image folder, the digits' ``shift``) or from ``samples`` (group name → training and test positions).
    """

    type: Literal["nc", "ni", "nic"] = "nc"
    n_tasks: Annotated[int, Field(ge=1)] | None = None
    tasks: list[list[Annotated[int, Field(ge=0)]]] | None = None
    class_order: list[Annotated[int, Field(ge=0)]] | None = None
    shuffle_seed: int | None = None
    first_task_learned: bool = False
    groups: list[str] | None = Field(None, description="ni/nic: the sample group of each task, in task order")
    classes: list[list[Annotated[int, Field(ge=0)]]] | None = Field(
        None, description="nic: the classes each task brings from its group"
    )
    samples: dict[str, GroupSamples] | None = Field(
        None, description="ni/nic: sample groups given by hand (instead of the data's)"
    )

    @field_validator("groups", "samples", mode="before")
    @classmethod
    def _integer_names(cls, value: Any) -> Any:
        """An NPZ's integer group ids are the groups ``"0"``, ``"1"`` …: written as numbers (YAML's
        ``groups: [2, 0]``) they name those groups, instead of failing as "not a string"."""
        if isinstance(value, list):
            return [str(v) if type(v) is int else v for v in value]  # not bool: YAML's on/off stay errors
        if isinstance(value, dict):
            return {str(k) if type(k) is int else k: v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _check(self) -> ScenarioSpec:
        if self.type != "nc":
            return self._check_groups()
        for name in ("groups", "classes", "samples"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: only for type ni or nic (sample-group scenarios)")
        if self.tasks is None and self.n_tasks is None:
            raise ValueError("give n_tasks (equal tasks) or tasks (explicit class groups)")
        if self.tasks is not None:
            if self.class_order is not None:
                raise ValueError("give either tasks or class_order, not both (tasks already fix the order)")
            if self.n_tasks is not None and self.n_tasks != len(self.tasks):
                raise ValueError(f"n_tasks is {self.n_tasks} but tasks lists {len(self.tasks)} groups")
            flat = [c for group in self.tasks for c in group]
            if any(not group for group in self.tasks):
                raise ValueError("tasks: every task needs at least one class")
            if len(set(flat)) != len(flat):
                raise ValueError("tasks: a class appears in more than one task")
        if self.class_order is not None and len(set(self.class_order)) != len(self.class_order):
            raise ValueError("class_order: a class appears more than once")
        if self.first_task_learned and self.tasks is None and self.n_tasks == 1:
            raise ValueError("first_task_learned needs at least 2 tasks (the first one is not trained)")
        return self

    def _check_groups(self) -> ScenarioSpec:
        kind = self.type
        for field_name in ("groups", "samples"):
            names = getattr(self, field_name)
            if names is not None and not names:
                raise ValueError(
                    f"{field_name}: at least one group (a {kind} scenario's tasks are its groups)"
                )
            for name in names or []:
                problem = group_name_problem(name)
                if problem:
                    raise ValueError(f"{field_name}: {problem}")
        for name in ("tasks", "class_order", "shuffle_seed"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: only for type nc; a {kind} scenario's tasks are its groups")
        if kind == "ni" and self.classes is not None:
            raise ValueError("classes: only for type nic (in ni every task brings every class)")
        if kind == "nic":
            self._check_nic()
        elif self.groups is not None and len(set(self.groups)) != len(self.groups):
            raise ValueError("groups: a group appears more than once (ni: one task per group)")
        n = len(self.groups) if self.groups is not None else None
        if self.n_tasks is not None and n is not None and self.n_tasks != n:
            raise ValueError(f"n_tasks is {self.n_tasks} but groups lists {n} groups")
        if self.first_task_learned and (n or self.n_tasks) == 1:
            raise ValueError("first_task_learned needs at least 2 tasks (the first one is not trained)")
        return self

    def _check_nic(self) -> None:
        """NIC: a list of classes per group, none empty, no group bringing one class twice."""
        assert self.type == "nic"
        if self.groups is None or self.classes is None:
            raise ValueError("nic needs groups (the group of each task) and classes (what it brings)")
        if len(self.classes) != len(self.groups):
            raise ValueError(f"classes: {len(self.classes)} lists for {len(self.groups)} groups (one each)")
        # (group, class) → the task that brought it: one pass, as an API body holds ~1e5 tasks
        brought: dict[tuple[str, int], int] = {}
        for k, (group, classes) in enumerate(zip(self.groups, self.classes, strict=True)):
            if not classes:
                raise ValueError(f"classes[{k}]: a task brings at least one class")
            if len(set(classes)) != len(classes):
                raise ValueError(f"classes[{k}]: a class appears more than once")
            again = [c for c in classes if (group, c) in brought]
            if again:
                j = min(brought[group, c] for c in again)
                again = sorted(c for c in again if brought[group, c] == j)
                raise ValueError(
                    f"classes[{k}]: group {group!r} already brought class(es) {again} in task {j + 1}"
                )
            brought.update({(group, c): k for c in classes})


# ---------------------------------------------------------------------- model
class ModelSpec(_Strict):
    """The candidate: a built-in architecture (optionally with weights), or a TorchScript module.

    ``weights``: a ``.safetensors`` file or a state dict saved with ``torch.save(model.state_dict())``
    (read with ``torch.load(weights_only=True)``). ``torchscript``: a module saved with
    ``torch.jit.save`` (trained in place). A pickled whole model (``torch.save(model)``) is refused and
    never unpickled. ``predict_over``: ``seen`` restricts training loss and prediction to the classes
    of the tasks seen so far; ``all`` uses every output.
    """

    arch: str | None = Field(
        None,
        description="mlp, cnn, resnet18-slim, or a hub architecture torchvision:NAME / timm:NAME "
        "(built with num_classes, randomly initialised; weights from model.weights)",
    )
    weights: str | None = None
    torchscript: str | None = None
    hidden: Annotated[int, Field(ge=1, le=MAX_HIDDEN)] = 400
    predict_over: Literal["seen", "all"] = "seen"
    head: Literal["fixed", "growing"] = Field(
        "fixed",
        description="growing: the output layer gets the rows of a task's classes when the task starts "
        "(parameters grow with the classes seen); fixed: all classes from the start",
    )

    @field_validator("arch")
    @classmethod
    def _arch(cls, value: str | None) -> str | None:
        if value is None or value in ("mlp", "cnn", "resnet18-slim"):
            return value
        if re.fullmatch(r"(torchvision|timm):[A-Za-z_][A-Za-z0-9_.\-]*", value):
            return value
        raise ValueError(
            "Input should be 'mlp', 'cnn' or 'resnet18-slim', or a hub architecture "
            f"'torchvision:NAME' or 'timm:NAME'; got {value!r}"
        )

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.torchscript is not None and (self.arch is not None or self.weights is not None):
            raise ValueError("give either torchscript, or arch (with optional weights), not both")
        if self.weights is not None and self.arch is None:
            raise ValueError("weights need arch (the architecture they belong to)")
        if self.head == "growing" and self.torchscript is not None:
            raise ValueError("head: growing needs arch (a TorchScript module's output layer cannot grow)")
        return self


# ---------------------------------------------------------------------- strategy
class StrategySpec(BaseModel):
    """Strategy name and its hyper-parameters.

    Hyper-parameters may be written in ``params`` or flat beside ``name`` (``{name: er, mem_size: 200}``);
    both end up in ``params``. Each strategy validates its own (``clgate.engine.strategies``).
    """

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1)] = "finetune"
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _bounded_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, v in value.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{key}: must be a finite number (got {v})")
            if (
                key.endswith("_size")
                and isinstance(v, int)
                and not isinstance(v, bool)
                and v > MAX_MEMORY_SIZE
            ):
                raise ValueError(f"{key}: at most {MAX_MEMORY_SIZE} (MAX_MEMORY_SIZE), got {v}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _flat_params(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data}
        if isinstance(data, dict):
            extra = {k: v for k, v in data.items() if k not in ("name", "params")}
            if extra:
                params = dict(data.get("params") or {})
                params.update(extra)
                return {k: v for k, v in data.items() if k in ("name",)} | {"params": params}
        return data


# ---------------------------------------------------------------------- training / evaluation
class TrainingSpec(_Strict):
    """How each task is trained. ``epochs`` or ``iterations`` (per task); ``iterations`` wins if given.

    The optimizer is rebuilt at the start of every task. ``precision: bf16`` uses bf16 autocast on
    CUDA (ignored on the CPU; the log's meta records what was used).
    """

    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: Annotated[float, Field(gt=0)] = 0.05
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)] = 16
    epochs: Annotated[int, Field(ge=1, le=MAX_EPOCHS)] = 1
    iterations: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)] | None = None
    precision: Literal["fp32", "bf16"] = "fp32"
    save_final: bool = Field(
        False,
        description=(
            "Write the final weights to model-seed{S}.safetensors (model-seed{S}.pt for TorchScript)."
        ),
    )


class EvaluationSpec(_Strict):
    """Continual evaluation.

    ``eval_every``: evaluate every that many updates (``null``: only at task ends). Task ends are
    always evaluated. ``before_first_update`` adds a point at iteration 0. ``subsample_per_task``: a
    fixed seeded subsample of each task's test set. ``future_tasks``: evaluate unseen tasks too.
    ``task_accuracy`` is recorded in the log's meta for the metrics.
    """

    eval_every: Annotated[int, Field(ge=1)] | None = 10
    before_first_update: bool = False
    subsample_per_task: Annotated[int, Field(ge=1)] | None = None
    future_tasks: bool = False
    task_accuracy: Literal["macro", "micro"] = "macro"
    batch_size: Annotated[int, Field(ge=1)] | None = Field(
        None,
        description="evaluation batch; null: chosen from the device and the input size "
        "(about 256 Ki input values a batch on the CPU, 16 Mi on CUDA, 16 … 4096 samples)",
    )


class CheckpointSpec(_Strict):
    """One checkpoint in evaluate mode: a model file, optionally its iteration and task (1-based)."""

    path: str
    iteration: Annotated[int, Field(ge=0)] | None = None
    task: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            return parse_checkpoint(data)
        return data


def parse_checkpoint(text: str) -> dict[str, Any]:
    """``PATH``, ``PATH@ITERATION`` or ``PATH@ITERATION:TASK`` → fields of a :class:`CheckpointSpec`.

    >>> parse_checkpoint("ck/t2.safetensors@150:2")
    {'path': 'ck/t2.safetensors', 'iteration': 150, 'task': 2}
    >>> parse_checkpoint("ck/t1.pt")
    {'path': 'ck/t1.pt'}
    """
    match = re.fullmatch(r"(?P<path>.+?)@(?P<iteration>\d+)(?::(?P<task>\d+))?", text)
    if not match:
        return {"path": text}
    out: dict[str, Any] = {"path": match["path"], "iteration": int(match["iteration"])}
    if match["task"] is not None:
        out["task"] = int(match["task"])
    return out


# ---------------------------------------------------------------------- the job
class JobSpec(_Strict):
    """A whole validation job (see the module docstring).

    ``cpu_threads``: torch intra-op threads while the job runs on the CPU (``0``: torch's default,
    all cores). The default 1 suits the small models and batches of continual learning, and a
    shared machine; raise it for large models.
    """

    format: Literal["clgate.job/v1"] = JOB_FORMAT
    mode: EngineMode = "retrain"
    data: DataSpec
    scenario: ScenarioSpec
    model: ModelSpec = Field(default_factory=lambda: ModelSpec(arch="mlp"))
    strategy: StrategySpec = Field(default_factory=StrategySpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    seeds: Annotated[list[int], Field(min_length=1, max_length=MAX_SEEDS)] = Field(
        default_factory=lambda: [0]
    )
    device: str = "auto"
    cpu_threads: Annotated[int, Field(ge=0)] = 1
    checkpoints: list[CheckpointSpec] | None = None

    @field_validator("data", mode="before")
    @classmethod
    def _data_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"kind": value}
        return value

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return [int(s) for s in value.split(",") if s.strip()]
            except ValueError:
                raise ValueError(f"{value!r} is not a comma-separated list of integers") from None
        if isinstance(value, int):
            return [value]
        return value

    @field_validator("cpu_threads")
    @classmethod
    def _at_most_the_cores(cls, value: int) -> int:
        cores = os.cpu_count() or 1
        if value > cores:
            raise ValueError(f"at most the machine's {cores} cores (got {value})")
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError("seeds must be distinct (one log per seed)")
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", value):
            raise ValueError(f"{value!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
        return value

    @model_validator(mode="after")
    def _mode(self) -> JobSpec:
        if self.mode == "evaluate":
            if not self.checkpoints:
                raise ValueError("checkpoints: evaluate mode needs at least one checkpoint")
        elif self.checkpoints:
            raise ValueError("checkpoints: only used in evaluate mode (mode: evaluate)")
        if self.mode == "retrain" and self.model.arch is None and self.model.torchscript is None:
            raise ValueError("model: give arch (mlp, cnn, resnet18-slim) or torchscript")
        if (
            self.mode == "retrain"
            and self.scenario.first_task_learned
            and (self.model.weights is None and self.model.torchscript is None)
        ):
            raise ValueError(
                "scenario.first_task_learned: needs the candidate's trained model (model.weights or "
                "model.torchscript); a freshly initialised model has learned nothing"
            )
        return self

    # ------------------------------------------------------------------ validation
    @classmethod
    def parse(cls, data: Mapping[str, Any], *, source: str | None = None) -> JobSpec:
        """Validate a job given as a mapping; raises :class:`JobSpecError` naming the field and the reason.

        Text (YAML or JSON) and files are read by :func:`clgate.documents.parse_job` and
        :func:`clgate.documents.load_job`.
        """
        if not isinstance(data, Mapping):
            raise JobSpecError(["the document must be a mapping of fields (data, scenario, model …)"], source)
        return validate(cls, dict(data), JobSpecError, source=source, tags=_TAGS)

    def with_overrides(self, overrides: Mapping[str, Any]) -> JobSpec:
        """A copy with dotted fields replaced: ``{"strategy.name": "er", "training.epochs": 2}``.

        Strategy hyper-parameters may be set flat: ``strategy.mem_size``. Command-line ``key=value``
        text becomes this mapping through :func:`clgate.documents.parse_overrides`.
        Raises :class:`JobSpecError`.
        """
        return type(self).from_overrides(overrides, base=self.model_dump(mode="python"))

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, Any], *, base: dict[str, Any] | None = None) -> JobSpec:
        """A spec built from ``base`` (a dict, default empty) with dotted fields set.

        >>> JobSpec.from_overrides({"data": "digits", "scenario.n_tasks": 5, "seeds": [1, 2]}).seeds
        [1, 2]
        """
        data = copy.deepcopy(base) if base is not None else {}
        problems: list[str] = []
        for key, value in overrides.items():
            parts = key.split(".")
            if parts[0] == "strategy" and len(parts) == 2 and parts[1] not in ("name", "params"):
                parts = ["strategy", "params", parts[1]]
            node: Any = data
            for i, part in enumerate(parts[:-1]):
                if isinstance(node.get(part), str) and part in ("data", "strategy"):
                    node[part] = {"kind" if part == "data" else "name": node[part]}
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    problems.append(f"override {key}: {'.'.join(parts[: i + 1])} is not a group of fields")
                    break
            else:
                node[parts[-1]] = value
        if problems:
            raise JobSpecError(problems)
        return validate(cls, data, JobSpecError, tags=_TAGS)


_TAGS = {"data": ("digits", "npz", "image_folder", "synthetic")}  # the data union's tags in error locations

"""What the process that runs the submitted model receives: files in one folder, no held-out label.

The trusted side (:func:`stage_job`) loads the data set (any kind: bundled digits and synthetic data are
made and split here too), chooses the evaluation samples, and writes into the stage folder:

- ``train_y.npy`` and ``train_x.npy`` (or, for an image folder, copies of the training images under
  ``train/`` named by position) — the training samples with their labels;
- ``train_task.npy`` in an NI/NIC scenario — the task each training sample belongs to (its sample
  group's task; ``-1``: none). Held-out samples carry no group: the child cannot tell which held-out
  input belongs to which group or class;
- ``heldout_x.npy`` — the held-out *inputs* only, in stored dtype, shuffled with a permutation drawn
  from the operating system's randomness and kept on the trusted side: neither their order nor their
  position tells the task or the class;
- ``data.json`` — ``n_classes``, ``tasks`` (the classes each task trains on), the input shape and how
  the training inputs are stored;
- ``spec.json`` — the job spec with the data paths removed and every model file (``model.weights``,
  ``model.torchscript``, checkpoints) replaced by its copy under ``models/``.

The child (:func:`load_staged`) reads nothing else. The labels (and, in NI/NIC, the cells) of the
held-out samples, the selection and the permutation stay in :class:`Staging` on the trusted side.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clgate.engine.data import Dataset
from clgate.engine.errors import ModelError
from clgate.engine.evaluator import HeldoutSelection
from clgate.engine.samples import ImageFiles
from clgate.schemas.job import JobSpec


@dataclass
class Staging:
    """The trusted side's key to what it staged: held-out labels and task ends in staged order."""

    folder: Path
    labels: np.ndarray  # the held-out label of each staged sample
    rank: np.ndarray  # each staged sample's position in the task-ordered selection
    selection: HeldoutSelection
    model_files: dict[str, Path] = field(default_factory=dict)  # staged name → the user's file
    train_files: list[Path] = field(default_factory=list)  # an image folder's training files, in order
    cells: np.ndarray | None = None  # NI/NIC: the log's cell of each staged sample (None: its label)

    @property
    def n(self) -> int:
        return len(self.labels)

    def original_paths(self, message: str) -> str:
        """``message`` (the child's) with every staged file's path replaced by the user's file."""

        def original(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("train/"):
                position = int(name[len("train/") : len("train/") + 7])
                return str(self.train_files[position]) if position < len(self.train_files) else name
            return str(self.model_files.get(name, name))

        return _STAGED_NAME.sub(original, message)


# a staged file's path as the child may print it (its folder differs inside bubblewrap)
_STAGED_NAME = re.compile(r"[^\s'\"]*?((?:models/\d{3}-|train/\d{7})[^\s:'\"]*)")


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)  # the bytes only: no link, no timestamps, no permissions


def _stage_models(
    spec: JobSpec, folder: Path, base_dir: Path | None
) -> tuple[dict[str, Any], dict[str, Path]]:
    """The spec the child reads (model files replaced by their copies) and staged name → original."""
    doc = spec.model_dump(mode="json")
    files: dict[str, Path] = {}

    def stage(text: str, index: int) -> str:
        path = Path(text).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        name = f"models/{index:03d}-{path.name}"
        if not path.is_file():
            raise ModelError(f"{path}: no such {'checkpoint file' if doc['mode'] == 'evaluate' else 'file'}")
        _copy(path, folder / name)
        files[name] = path
        return name

    for key in ("weights", "torchscript"):
        if doc["model"].get(key):
            doc["model"][key] = stage(doc["model"][key], len(files))
    for ck in doc.get("checkpoints") or []:
        ck["path"] = stage(ck["path"], len(files))
    data = dict(doc["data"])
    if "path" in data:
        data["path"] = "staged"
    doc["data"] = data
    doc["scenario"] = {**doc["scenario"], "samples": None}  # held-out positions per group: trusted side only
    return doc, files


def stage_job(
    spec: JobSpec,
    data: Dataset,
    tasks: list[list[int]],
    selection: HeldoutSelection,
    folder: Path,
    *,
    base_dir: Path | None = None,
    test_cell: np.ndarray | None = None,
    train_task: np.ndarray | None = None,
) -> Staging:
    """Write the child's inputs into ``folder`` (see the module docstring); returns the trusted key.

    ``tasks``: the classes each task trains on. NI/NIC: ``test_cell`` is the log's cell of every test
    sample (``selection`` is over cells; kept here), ``train_task`` the task of every training sample
    (staged)."""
    folder.mkdir(parents=True, exist_ok=True)
    perm = np.random.default_rng(secrets.randbits(128)).permutation(len(selection.indices))
    rows = selection.indices[perm]
    x_test = data.x_test
    heldout = x_test.read(rows) if isinstance(x_test, ImageFiles) else np.ascontiguousarray(x_test[rows])
    np.save(folder / "heldout_x.npy", heldout)
    np.save(folder / "train_y.npy", np.asarray(data.y_train, dtype=np.int64))
    if train_task is not None:
        np.save(folder / "train_task.npy", np.asarray(train_task, dtype=np.int64))
    info: dict[str, Any] = {
        "n_classes": data.n_classes,
        "tasks": tasks,
        "input_shape": list(data.input_shape),
    }
    if isinstance(data.x_train, ImageFiles):
        names = []
        for i, path in enumerate(data.x_train.paths):
            names.append(f"train/{i:07d}{path.suffix.lower()}")
            _copy(path, folder / names[-1])
        info["train"] = {
            "kind": "images",
            "files": names,
            "size": list(data.x_train.size),
            "color": data.x_train.color,
        }
    else:
        np.save(folder / "train_x.npy", np.ascontiguousarray(data.x_train))
        info["train"] = {"kind": "array"}
    (folder / "data.json").write_text(json.dumps(info), encoding="utf-8")
    doc, files = _stage_models(spec, folder, base_dir)
    (folder / "spec.json").write_text(json.dumps(doc), encoding="utf-8")
    train_files = list(data.x_train.paths) if isinstance(data.x_train, ImageFiles) else []
    labels = np.asarray(data.y_test)[rows].astype(np.int64)
    cells = None if test_cell is None else np.asarray(test_cell)[rows].astype(np.int64)
    return Staging(folder, labels, perm, selection, files, train_files, cells)


@dataclass
class StagedData:
    """The child's view: training samples with labels, held-out inputs without."""

    x_train: np.ndarray | ImageFiles
    y_train: np.ndarray
    heldout_x: np.ndarray
    n_classes: int
    tasks: list[list[int]]
    input_shape: tuple[int, ...]
    train_task: np.ndarray | None = None  # NI/NIC: each training sample's task (-1: none)


def load_staged(folder: Path) -> tuple[JobSpec, StagedData]:
    """The child side: the staged spec and data (arrays memory-mapped, read on use)."""
    info = json.loads((folder / "data.json").read_text(encoding="utf-8"))
    train = info["train"]
    x_train: np.ndarray | ImageFiles
    if train["kind"] == "images":
        x_train = ImageFiles(
            [folder / name for name in train["files"]], size=tuple(train["size"]), color=train["color"]
        )
    else:
        x_train = np.load(folder / "train_x.npy", mmap_mode="r", allow_pickle=False)
    staged = StagedData(
        x_train=x_train,
        y_train=np.load(folder / "train_y.npy", allow_pickle=False),
        heldout_x=np.load(folder / "heldout_x.npy", allow_pickle=False),
        n_classes=int(info["n_classes"]),
        tasks=[list(map(int, t)) for t in info["tasks"]],
        input_shape=tuple(int(s) for s in info["input_shape"]),
        train_task=np.load(folder / "train_task.npy", allow_pickle=False)
        if (folder / "train_task.npy").is_file()
        else None,
    )
    spec = JobSpec.parse(json.loads((folder / "spec.json").read_text(encoding="utf-8")))
    return spec, staged

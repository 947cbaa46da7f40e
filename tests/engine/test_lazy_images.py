"""Image folders are read lazily: paths at load time, pixels per batch (by DataLoader worker
processes), so a folder trains the same as the same images held in an array, decoding only what the
run reads, and a file that cannot be decoded stops the run with a message naming it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from clgate.documents import load_log
from clgate.engine import run_job, trusted
from clgate.engine.data import load_image_folder
from clgate.engine.errors import DataError
from clgate.engine.runner import ChildLaunch
from clgate.engine.samples import ImageFiles, Samples, iterate_batches
from clgate.schemas.job import JobSpec

CLASSES = ("ant", "bee", "cat", "dog")


def _folder(root, per_class=(12, 4), size=10):
    rng = np.random.default_rng(3)
    for split, n in zip(("train", "test"), per_class, strict=True):
        for c, name in enumerate(CLASSES):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                base = rng.integers(0, 256, size=(size, size, 3)) // 4 + 48 * c
                Image.fromarray(base.astype(np.uint8)).save(root / split / name / f"{i:03d}.png")
    return root


def _spec(data, strategy="er", subsample=None, **training):
    return JobSpec.model_validate(
        {
            "data": data,
            "scenario": {"n_tasks": 2},
            "model": {"arch": "cnn"},
            "strategy": {"name": strategy, "mem_size": 8},
            "training": {"batch_size": 8, "epochs": 2, **training},
            "evaluation": {"eval_every": 2, "subsample_per_task": subsample},
            "device": "cpu",
        }
    )


def test_folder_load_keeps_paths_not_pixels(tmp_path, monkeypatch):
    decoded = []
    original = ImageFiles.decode
    monkeypatch.setattr(ImageFiles, "decode", lambda self, i: decoded.append(i) or original(self, i))
    ds = load_image_folder(_folder(tmp_path / "f"), size=(8, 8))
    assert isinstance(ds.x_train, ImageFiles) and ds.x_train.shape == (48, 3, 8, 8)
    assert ds.stored_dtype == "uint8" and ds.x_train.nbytes == 48 * 3 * 8 * 8
    ds.digest()
    assert decoded == []  # loading and the digest (the files' bytes) decode nothing
    one = ds.x_train[5]
    assert one.shape == (3, 8, 8) and one.dtype == np.uint8 and decoded == [5]
    assert np.array_equal(ds.x_train[[5, 1]][0], one)
    assert np.array_equal(ds.x_train.read(np.array([1, 5]), workers=2), ds.x_train[[1, 5]])


def test_folder_trains_like_the_same_images_in_an_array(tmp_path):
    """Through worker processes or in this process, a folder gives the log of the same pixels as an NPZ:
    the same batches in the same order, the same evaluation samples."""
    root = _folder(tmp_path / "f")
    ds = load_image_folder(root, size=(10, 10))
    np.savez(
        tmp_path / "same.npz",
        x_train=ds.x_train[:],
        y_train=ds.y_train,
        x_test=ds.x_test[:],
        y_test=ds.y_test,
        class_names=np.array(CLASSES),
    )
    logs = {}
    for name, data in {
        "npz": {"kind": "npz", "path": str(tmp_path / "same.npz")},
        "workers": {"kind": "image_folder", "path": str(root), "size": [10, 10], "workers": 2},
        "inline": {"kind": "image_folder", "path": str(root), "size": [10, 10], "workers": 0},
    }.items():
        (path,) = run_job(_spec(data), tmp_path / name)
        logs[name] = load_log(path)
    points = {name: [(p.iteration, p.correct, p.total) for p in log.points] for name, log in logs.items()}
    assert len(points["npz"]) == 6  # 2 tasks × 6 updates, a point every 2
    assert points["workers"] == points["npz"] and points["inline"] == points["npz"]
    assert [r.train_bytes for r in logs["workers"].resources] == [
        r.train_bytes for r in logs["npz"].resources
    ]


# The child, counting the images it decodes (it runs in its own process: the count goes to a file).
COUNTING_CHILD = """
import sys
from pathlib import Path
import clgate.engine.child as child
from clgate.engine.samples import ImageFiles
decoded = []
original = ImageFiles.decode
ImageFiles.decode = lambda self, i: decoded.append(i) or original(self, i)
code = child.main(sys.argv[1:])
Path(sys.argv[2], "decoded.txt").write_text(str(len(decoded)))
sys.exit(code)
"""


def test_only_what_the_run_reads_is_decoded(tmp_path, monkeypatch):
    """A run of few updates on an evaluation subsample decodes its batches and its subsample, not the set:
    the trusted side decodes the evaluation subsample (staged as arrays), the child its batches."""
    decoded = []
    original = ImageFiles.decode
    monkeypatch.setattr(ImageFiles, "decode", lambda self, i: decoded.append(i) or original(self, i))
    monkeypatch.setenv(
        "CLGATE_DATA_WORKERS", "0"
    )  # every decode in the process that asks, where it is counted
    root = _folder(tmp_path / "f", per_class=(30, 10))
    data = {"kind": "image_folder", "path": str(root), "size": [10, 10], "workers": 0}
    in_child: dict[str, int] = {}

    def counting(launch: ChildLaunch) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-c", COUNTING_CHILD, *launch.argv()[3:]]
        in_child["out"] = launch.out  # type: ignore[assignment]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        return proc

    real_collect = trusted._collect_models

    def collect(session, child_out):  # read the child's count before its folder goes
        in_child["n"] = int((child_out / "decoded.txt").read_text())
        real_collect(session, child_out)

    monkeypatch.setattr(trusted, "_collect_models", collect)
    run_job(_spec(data, "finetune", subsample=4, iterations=2), tmp_path / "run", launcher=counting)
    assert len(decoded) == 2 * 4  # the evaluation samples of 2 tasks, of 160 images
    assert in_child["n"] == 2 * 2 * 8 + 2  # 2 tasks × 2 updates × 8 + 2 examples (cost counting)


def test_an_undecodable_file_stops_the_run_naming_it(tmp_path):
    root = _folder(tmp_path / "f")
    broken = root / "train" / "cat" / "005.png"
    broken.write_bytes(broken.read_bytes()[:60])  # a PNG header, then nothing
    data = {"kind": "image_folder", "path": str(root), "size": [10, 10], "workers": 2}
    with pytest.raises(DataError) as err:
        run_job(_spec(data), tmp_path / "run")
    message = str(err.value)
    assert message.startswith(str(broken)) and "cannot decode image" in message
    assert "Traceback" not in message and "worker" not in message


def test_not_an_image_is_refused_at_load(tmp_path):
    root = _folder(tmp_path / "f")
    (root / "test" / "bee" / "notes.png").write_text("not an image")
    with pytest.raises(DataError, match=r"notes.png: cannot decode image"):
        load_image_folder(root)


def test_samples_join_take_and_batches():
    x = np.arange(20, dtype=np.uint8).reshape(10, 2)
    y = np.array([0, 1] * 5)
    a, b = Samples(x, y).where_label([0]), Samples(x, y).where_label([1])
    both = a + b
    assert both.labels.tolist() == [0] * 5 + [1] * 5 and both.input_nbytes == 10 * (2 * 4 + 8)
    xs, ys = both.take([0, 9])
    assert xs.dtype.is_floating_point is False and xs.tolist() == [[0, 1], [18, 19]] and ys.tolist() == [0, 1]
    with pytest.raises(ValueError, match="one source"):
        a + Samples(x.copy(), y)
    import torch

    ((xb, yb),) = iterate_batches(both, [torch.tensor([9])], torch.device("cpu"))
    assert xb.dtype == torch.float32 and torch.allclose(xb, torch.tensor([[18 / 255, 19 / 255]]))
    assert yb.tolist() == [1]

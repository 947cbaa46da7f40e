"""Every loader and every validation error, each naming the file and the problem."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from clgate.engine.data import (
    load_data,
    load_digits,
    load_image_folder,
    load_npz,
    make_synthetic,
    model_input,
)
from clgate.engine.errors import DataError


def _arrays(n_classes: int = 3, per_class: int = 4, features: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(n_classes), per_class)
    return {
        "x_train": rng.normal(size=(len(y), features)).astype(np.float32),
        "y_train": y.copy(),
        "x_test": rng.normal(size=(len(y), features)).astype(np.float32),
        "y_test": y.copy(),
    }


def _save(tmp_path, **arrays) -> str:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return str(path)


def test_digits_split_is_stratified_seeded_and_scaled():
    a = load_digits(split_seed=0)
    b = load_digits(split_seed=0)
    c = load_digits(split_seed=1)
    assert a.x_train.shape[1:] == (1, 8, 8) and a.n_classes == 10
    assert np.array_equal(a.y_test, b.y_test) and not np.array_equal(a.y_test, c.y_test)
    assert a.x_train.min() >= 0.0 and a.x_train.max() <= 1.0
    counts = np.bincount(a.y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20 % of ~180 per class
    assert len(a.y_train) + len(a.y_test) == 1797


def test_npz_loads_with_class_names_and_uint8_scaling(tmp_path):
    arrays = _arrays()
    arrays["x_train"] = (np.arange(12 * 5).reshape(12, 5) % 256).astype(np.uint8)
    arrays["x_test"] = arrays["x_train"].copy()
    ds = load_npz(_save(tmp_path, **arrays, class_names=np.array(["a", "b", "c"])))
    # kept as stored (4× smaller than float32); scaled to [0, 1] per batch
    assert ds.class_names == ["a", "b", "c"] and ds.x_train.dtype == np.uint8
    assert model_input(ds.x_train).dtype == np.float32 and model_input(ds.x_train).max() == pytest.approx(
        59 / 255
    )


@pytest.mark.parametrize(
    "change,message",
    [
        pytest.param(lambda a: a.pop("y_test"), r"missing array\(s\) y_test", id="missing-array"),
        pytest.param(
            lambda a: a.update(y_train=a["y_train"][:-1]),
            "x_train has 12 samples but y_train has 11 labels",
            id="length-mismatch",
        ),
        pytest.param(
            lambda a: a.update(x_test=a["x_test"][:, :4]),
            r"x_train samples have shape \(5,\) but x_test samples have shape \(4,\)",
            id="feature-mismatch",
        ),
        pytest.param(
            lambda a: a.update(x_train=a["x_train"][:, 0]),
            r"x_train has shape \(12,\); expected \(N, features",
            id="x-1d",
        ),
        pytest.param(
            lambda a: a.update(y_train=a["y_train"].reshape(6, 2)),
            r"y_train has shape \(6, 2\); expected a 1-D vector",
            id="y-2d",
        ),
        pytest.param(
            lambda a: a.update(y_train=a["y_train"].astype(np.float32)),
            "y_train has dtype float32; labels must be integers",
            id="float-labels",
        ),
        pytest.param(
            lambda a: a.update(x_train=a["x_train"].astype(np.complex64)),
            "x_train has dtype complex64; expected a numeric",
            id="complex-inputs",
        ),
        pytest.param(
            lambda a: a["x_train"].__setitem__((3, 2), np.nan),
            r"x_train contains NaN values \(first at sample 3\)",
            id="nan",
        ),
        pytest.param(
            lambda a: a["x_test"].__setitem__((5, 0), np.inf),
            r"x_test contains inf values \(first at sample 5\)",
            id="inf",
        ),
        pytest.param(
            lambda a: a["y_train"].__setitem__(0, -1), "y_train has negative label -1", id="negative-label"
        ),
        pytest.param(
            lambda a: a.update(y_test=np.where(a["y_test"] == 2, 0, a["y_test"])),
            r"class\(es\) 2 have no test samples",
            id="class-without-test-samples",
        ),
        pytest.param(
            lambda a: a["y_test"].__setitem__(0, 3),
            r"train/test class mismatch: class\(es\) 3 appear in y_test but not in y_train",
            id="train-test-mismatch",
        ),
        pytest.param(
            lambda a: a.update(
                y_train=np.where(a["y_train"] == 1, 2, a["y_train"]),
                y_test=np.where(a["y_test"] == 1, 2, a["y_test"]),
            ),
            r"class\(es\) 1 have no training or test samples",
            id="label-gap",
        ),
        pytest.param(
            lambda a: a.update(x_train=a["x_train"][:0], y_train=a["y_train"][:0]),
            r"x_train is empty",
            id="empty",
        ),
        pytest.param(
            lambda a: a.update(class_names=np.array(["a", "b"])),
            r"label 2 is out of range for 2 class_names",
            id="label-out-of-range",
        ),
        pytest.param(
            lambda a: a.update(class_names=np.array([1, 2, 3])),
            "class_names must be a 1-D array of strings",
            id="class-names-not-strings",
        ),
    ],
)
def test_npz_errors_name_the_file_and_the_problem(tmp_path, change, message):
    arrays = _arrays()
    change(arrays)
    path = _save(tmp_path, **arrays)
    with pytest.raises(DataError, match=message) as info:
        load_npz(path)
    assert str(info.value).startswith(path + ":")


def test_npz_object_arrays_are_refused_without_unpickling(tmp_path):
    arrays = _arrays()
    arrays["class_names"] = np.array(["a", None, "c"], dtype=object)
    path = _save(tmp_path, **arrays)
    with pytest.raises(DataError, match="object arrays are refused"):
        load_npz(path)


def test_npz_not_an_archive(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"this is not a zip")
    with pytest.raises(DataError, match=f"{bad}: not a readable .npz file"):
        load_npz(bad)
    with pytest.raises(DataError, match="no such file"):
        load_npz(tmp_path / "missing.npz")
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(DataError, match=r"not an .npz archive"):
        load_npz(single)


def _image_folder(root, classes=("cat", "dog"), per_class=2, size=(6, 5)):
    for split in ("train", "test"):
        for i, name in enumerate(classes):
            d = root / split / name
            d.mkdir(parents=True)
            for j in range(per_class):
                arr = np.full((size[1], size[0], 3), 40 * i + j, dtype=np.uint8)
                Image.fromarray(arr).save(d / f"{j}.png")
    return root


def test_image_folder_loads_resized_channels_first(tmp_path):
    root = _image_folder(tmp_path / "imgs")
    ds = load_image_folder(root, size=(4, 4), color="RGB")
    assert ds.x_train.shape == (4, 3, 4, 4) and ds.class_names == ["cat", "dog"]
    assert ds.y_train.tolist() == [0, 0, 1, 1]
    assert ds.x_train.dtype == np.uint8 and model_input(ds.x_train[2]).max() == pytest.approx(40 / 255)
    gray = load_image_folder(root, size=(3, 5), color="L")
    assert gray.x_test.shape == (4, 1, 3, 5)


def test_image_folder_errors(tmp_path):
    root = _image_folder(tmp_path / "a")
    (root / "test" / "dog" / "0.png").write_bytes(b"not an image")
    with pytest.raises(DataError, match=r"a/test/dog/0.png: cannot decode image"):
        load_image_folder(root)

    root = _image_folder(tmp_path / "b")
    for f in (root / "test" / "dog").iterdir():
        f.unlink()
    with pytest.raises(DataError, match=r"b/test/dog: no image files \(class 'dog' has no test samples\)"):
        load_image_folder(root)

    root = _image_folder(tmp_path / "c")
    (root / "test" / "bird").mkdir()
    with pytest.raises(
        DataError, match=r"train/test class mismatch: class\(es\) bird are in test/ but not in train/"
    ):
        load_image_folder(root)

    root = _image_folder(tmp_path / "d")
    for f in (root / "test" / "cat").iterdir():
        f.unlink()
    (root / "test" / "cat").rmdir()
    with pytest.raises(DataError, match=r"class\(es\) cat have no test/ folder"):
        load_image_folder(root)

    with pytest.raises(DataError, match="missing folder train/"):
        load_image_folder(tmp_path / "nothing")


def test_synthetic_is_deterministic_and_dispatch(tmp_path):
    a = make_synthetic(seed=3)
    b = load_data({"kind": "synthetic", "seed": 3})
    assert np.array_equal(a.x_train, b.x_train) and a.digest() == b.digest()
    assert a.digest() != make_synthetic(seed=4).digest()
    with pytest.raises(DataError, match="unknown kind"):
        load_data({"kind": "csv"})

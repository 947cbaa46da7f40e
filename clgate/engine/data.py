"""Data sets for the engine: bundled digits, NPZ files, image folders, synthetic clusters.

Every loader returns a validated :class:`Dataset` (numpy arrays; inputs float32, or uint8 images
kept as stored and scaled to [0, 1] per batch by :func:`model_input`; int64 labels ``0 … C-1``) or raises
:class:`~clgate.engine.errors.DataError` naming the file and the problem:
shapes, dtypes, label range, NaN/inf, classes without test (or training) samples, and train/test
class mismatch.

>>> ds = load_data({"kind": "synthetic", "n_classes": 3, "n_features": 4,
...                  "train_per_class": 5, "test_per_class": 2})
>>> ds.x_train.shape, ds.n_classes, ds.class_names
((15, 4), 3, ['0', '1', '2'])
"""

from __future__ import annotations

import hashlib
import math
import os
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from clgate.engine.errors import DataError
from clgate.engine.samples import DECODE_ERRORS, ImageFiles

# model_input lives with the batches it converts (samples, which data imports, never the other way);
# re-exported here, where callers have always found it.
from clgate.engine.samples import model_input as model_input
from clgate.schemas.job import group_name_problem

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}


@dataclass
class Dataset:
    """Held-out class set: training and test arrays with labels ``0 … C-1``."""

    x_train: np.ndarray | ImageFiles
    y_train: np.ndarray
    x_test: np.ndarray | ImageFiles
    y_test: np.ndarray
    class_names: list[str]
    source: str
    meta: dict[str, Any] = field(default_factory=dict)
    group_train: np.ndarray | None = None  # sample group id of each training sample (NI/NIC data)
    group_test: np.ndarray | None = None  # … and of each test sample
    group_names: list[str] = field(default_factory=list)  # the name of each group id

    @property
    def has_groups(self) -> bool:
        return self.group_train is not None and self.group_test is not None

    @property
    def stored_dtype(self) -> str:
        """``uint8`` when images are kept as stored (4× smaller than float32), else ``float32``."""
        return str(self.x_train.dtype)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def digest(self, *, groups: bool = True) -> str:
        """sha256 over the arrays (an image folder: its files' bytes) and class names (provenance in the
        log's meta), streamed in 16 MiB slices without a copy of the data; with ``groups`` (and groups
        present) the sample groups too — an NC job leaves them out, its digest is what it always was."""
        h = hashlib.sha256()
        for a in (self.x_train, self.y_train, self.x_test, self.y_test):
            if isinstance(a, ImageFiles):
                a.digest_into(h)
                continue
            h.update(str(a.shape).encode())
            a = np.ascontiguousarray(a)
            flat = a.reshape(-1).view(np.uint8)
            for start in range(0, len(flat), 1 << 24):  # streamed: no whole-array byte copy
                h.update(flat[start : start + (1 << 24)].data)
        h.update("\x00".join(self.class_names).encode())
        if groups and self.group_train is not None and self.group_test is not None:
            for a in (self.group_train, self.group_test):
                h.update(np.ascontiguousarray(a, dtype=np.int64).data)
            h.update("\x00".join(self.group_names).encode())
        return h.hexdigest()


MAX_DATA_BYTES = 2048 << 20  # CLGATE_MAX_NPZ_BYTES's default (the service's setting, the CLI's too)
MAX_SAMPLES = 5_000_000  # CLGATE_MAX_SAMPLES's default


@dataclass(frozen=True)
class DataLimits:
    """The bounds a data set is judged against before it is loaded, from its headers only: decompressed
    bytes (``CLGATE_MAX_NPZ_BYTES``) and samples per array (``CLGATE_MAX_SAMPLES``). The service applies
    its settings; ``clgate run``/``evaluate`` the same variables (or their flags)."""

    max_bytes: int = MAX_DATA_BYTES
    max_samples: int = MAX_SAMPLES

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DataLimits:
        """The limits the ``CLGATE_MAX_*`` variables of ``env`` (default: this process's) set;
        :class:`DataError` naming the variable when one is not a positive integer."""
        env = os.environ if env is None else env
        values = {}
        for var, name, default in (
            ("CLGATE_MAX_NPZ_BYTES", "max_bytes", MAX_DATA_BYTES),
            ("CLGATE_MAX_SAMPLES", "max_samples", MAX_SAMPLES),
        ):
            raw = env.get(var, "").strip()
            try:
                values[name] = int(raw) if raw else default
            except ValueError:
                values[name] = 0
            if values[name] <= 0:
                raise DataError(f"{var}: must be a positive integer (got {raw!r})")
        return cls(**values)

    def problems(self, spec: Mapping[str, Any], base_dir: Path | None) -> list[str]:
        """Why the data ``spec`` names is over these limits (``[]`` when it is not, or has no file)."""
        kind, raw = spec.get("kind"), spec.get("path")
        if kind not in ("npz", "image_folder") or not raw:
            return []
        path = _resolve(raw, base_dir)
        if kind == "npz":
            return check_npz_limits(path, max_bytes=self.max_bytes, max_samples=self.max_samples)
        size = tuple(spec.get("size") or (32, 32))
        return check_image_folder_limits(
            path,
            size=(int(size[0]), int(size[1])),
            color=spec.get("color", "RGB"),
            max_bytes=self.max_bytes,
            max_samples=self.max_samples,
        )


_LIMITS: ContextVar[DataLimits | None] = ContextVar("clgate_data_limits", default=None)


@contextmanager
def data_limits(limits: DataLimits | None) -> Iterator[None]:
    """Within the block, :func:`load_data` refuses data over ``limits`` before loading it (``None``: no
    limits — the CLI's ``--no-limits``, and the service's job child, whose data the trusted side judged)."""
    token = _LIMITS.set(limits)
    try:
        yield
    finally:
        _LIMITS.reset(token)


def load_data(spec: Any, base_dir: Path | None = None) -> Dataset:
    """Load the data a job names (a ``clgate.schemas.job`` data model or an equivalent dict), after
    judging it against the :func:`data_limits` in force (:class:`DataError` naming the limit)."""
    if hasattr(spec, "model_dump"):
        spec = spec.model_dump()
    limits = _LIMITS.get()
    problems = limits.problems(spec, base_dir) if limits is not None else []
    if problems:
        raise DataError("\n".join(f"data: {p}" for p in problems))
    kind = spec.get("kind")
    if kind == "digits":
        ds = load_digits(test_fraction=spec.get("test_fraction", 0.2), split_seed=spec.get("split_seed", 0))
        shift = spec.get("shift")
        return shift_digits(ds, **shift) if shift else ds
    if kind == "npz":
        return load_npz(
            _resolve(spec["path"], base_dir),
            layout=spec.get("layout", "channels_first"),
            groups=spec.get("groups", "group"),
        )
    if kind == "image_folder":
        return load_image_folder(
            _resolve(spec["path"], base_dir),
            size=tuple(spec.get("size", (32, 32))),
            color=spec.get("color", "RGB"),
            grouped=bool(spec.get("grouped", False)),
        )
    if kind == "synthetic":
        args = {k: v for k, v in spec.items() if k != "kind"}
        return make_synthetic(**args)
    raise DataError(f"data: unknown kind {kind!r} (digits, npz, image_folder, synthetic)")


def _resolve(path: str | Path, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p


# ---------------------------------------------------------------------- validation
def validate_arrays(
    x_train: Any,
    y_train: Any,
    x_test: Any,
    y_test: Any,
    class_names: list[str] | None,
    source: str,
) -> Dataset:
    """Check and normalise four arrays into a :class:`Dataset`; raise :class:`DataError` on the first problem.

    uint8 inputs are kept as stored (scaled to [0, 1] per batch by :func:`model_input`); uint16 inputs
    are scaled to [0, 1] (÷ 65535) as float32; other numeric inputs become float32 as they are.
    """
    arrays = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    _check_shapes_and_dtypes(arrays, source)
    _check_values(arrays, source)
    class_names = _class_names(y_train, y_test, class_names, source)
    _check_class_coverage(y_train, y_test, class_names, source)
    return Dataset(
        x_train=_as_float(x_train),
        y_train=y_train.astype(np.int64),
        x_test=_as_float(x_test),
        y_test=y_test.astype(np.int64),
        class_names=class_names,
        source=source,
    )


def _check_shapes_and_dtypes(arrays: dict[str, Any], source: str) -> None:
    """Arrays, not empty; samples numeric with a feature axis; labels integer vectors; counts agree."""
    for name, a in arrays.items():
        if not isinstance(a, (np.ndarray, ImageFiles)):
            raise DataError(f"{source}: {name} is not an array")
        if len(a) == 0 or math.prod(a.shape) == 0:
            raise DataError(f"{source}: {name} is empty (shape {a.shape})")
    for name in ("x_train", "x_test"):
        a = arrays[name]
        if a.ndim < 2:
            raise DataError(f"{source}: {name} has shape {a.shape}; expected (N, features…) with N samples")
        if not (
            np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_
        ):
            raise DataError(
                f"{source}: {name} has dtype {a.dtype}; expected a numeric (float or integer) array"
            )
    for name in ("y_train", "y_test"):
        a = arrays[name]
        if a.ndim != 1:
            raise DataError(f"{source}: {name} has shape {a.shape}; expected a 1-D vector of labels")
        if not np.issubdtype(a.dtype, np.integer):
            raise DataError(f"{source}: {name} has dtype {a.dtype}; labels must be integers 0 … C-1")
    for split in ("train", "test"):
        nx, ny = len(arrays[f"x_{split}"]), len(arrays[f"y_{split}"])
        if nx != ny:
            raise DataError(f"{source}: x_{split} has {nx} samples but y_{split} has {ny} labels")
    x_train, x_test = arrays["x_train"], arrays["x_test"]
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(
            f"{source}: x_train samples have shape {x_train.shape[1:]} but x_test samples have "
            f"shape {x_test.shape[1:]}"
        )


def _check_values(arrays: dict[str, Any], source: str) -> None:
    """Samples finite (float ones), labels not negative."""
    for name in ("x_train", "x_test"):
        a = arrays[name]
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            bad = np.argwhere(~np.isfinite(a.reshape(len(a), -1)))[0][0]
            kind = "NaN" if np.isnan(a).any() else "inf"
            raise DataError(f"{source}: {name} contains {kind} values (first at sample {int(bad)})")
    for name in ("y_train", "y_test"):
        a = arrays[name]
        if a.min() < 0:
            raise DataError(f"{source}: {name} has negative label {int(a.min())}; labels must be 0 … C-1")


def _class_names(
    y_train: np.ndarray, y_test: np.ndarray, class_names: list[str] | None, source: str
) -> list[str]:
    """The given names as strings (enough of them, none twice), or ``"0" … "C-1"`` when none are given."""
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    if class_names is None:
        return [str(c) for c in range(n_classes)]
    class_names = [str(n) for n in class_names]
    if len(class_names) < n_classes:
        raise DataError(
            f"{source}: label {n_classes - 1} is out of range for {len(class_names)} "
            "class_names (labels must be 0 … C-1)"
        )
    if len(set(class_names)) != len(class_names):
        raise DataError(f"{source}: class_names has duplicate names")
    return class_names


def _check_class_coverage(
    y_train: np.ndarray, y_test: np.ndarray, class_names: list[str], source: str
) -> None:
    """Every class has training samples and held-out samples; test-only classes are named first."""
    n_classes = len(class_names)
    train_counts = np.bincount(y_train, minlength=n_classes)
    test_counts = np.bincount(y_test, minlength=n_classes)
    test_only = np.flatnonzero((train_counts == 0) & (test_counts > 0))
    if len(test_only):
        raise DataError(
            f"{source}: train/test class mismatch: class(es) {_names(test_only, class_names)} "
            "appear in y_test but not in y_train"
        )
    no_train = np.flatnonzero(train_counts == 0)
    if len(no_train):
        raise DataError(
            f"{source}: class(es) {_names(no_train, class_names)} have no training or test samples "
            "(labels must be 0 … C-1 without gaps)"
        )
    no_test = np.flatnonzero(test_counts == 0)
    if len(no_test):
        raise DataError(
            f"{source}: class(es) {_names(no_test, class_names)} have no test samples (every class "
            "needs held-out samples to be evaluated)"
        )


def _as_float(a: np.ndarray | ImageFiles) -> np.ndarray | ImageFiles:
    """Model-ready storage: uint8 images kept (4× smaller; :func:`model_input` scales each batch),
    16-bit unsigned images scaled to [0, 1] float32, other numbers float32 as they are."""
    if isinstance(a, ImageFiles):
        return a  # uint8, decoded per batch
    if a.dtype == np.uint8:
        return a if isinstance(a, np.memmap) else np.ascontiguousarray(a)
    if a.dtype == np.uint16:
        return (a.astype(np.float32) / float(np.iinfo(a.dtype).max)).astype(np.float32)
    return np.ascontiguousarray(a, dtype=np.float32)


def _names(ids: np.ndarray, names: list[str]) -> str:
    shown = [f"{int(c)}" + (f" ({names[c]})" if names[c] != str(c) else "") for c in ids[:8]]
    return ", ".join(shown) + (f", … ({len(ids)} in all)" if len(ids) > 8 else "")


# ---------------------------------------------------------------------- loaders
def load_digits(*, test_fraction: float = 0.2, split_seed: int = 0) -> Dataset:
    """scikit-learn's digits as ``(N, 1, 8, 8)`` images in [0, 1]; stratified seeded held-out split."""
    # scikit-learn (slow to import): only the digits data set needs it
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_digits()
    x = (bunch.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = bunch.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=test_fraction, random_state=split_seed, stratify=y
    )
    ds = validate_arrays(x_train, y_train, x_test, y_test, [str(c) for c in range(10)], "digits")
    ds.meta = {"test_fraction": test_fraction, "split_seed": split_seed}
    return ds


def shift_digits(
    ds: Dataset, *, type: str, groups: int = 3, step: float | None = None, seed: int = 0
) -> Dataset:
    """The digits split into ``groups`` sample groups of the same classes, group g shifted by g steps.

    Within every class of each split, a ``seed``-drawn permutation deals the samples to the groups in
    turn (every group gets about the same share of every class). ``rotation`` turns group g's images by
    ``g · step`` degrees (default step 30; bilinear, corners filled with 0), ``brightness`` scales them by
    ``1 - g · step`` (default step 0.25). Deterministic for a given ``seed``.

    >>> ds = shift_digits(load_digits(), type="rotation", groups=3)
    >>> ds.group_names, np.bincount(ds.group_test).tolist()
    (['rot0', 'rot30', 'rot60'], [122, 120, 118])
    """
    if type not in ("rotation", "brightness"):
        raise DataError(f"data.shift.type: {type!r} is not a shift (rotation, brightness)")
    step = step if step is not None else (30.0 if type == "rotation" else 0.25)
    if type == "brightness" and (groups - 1) * step >= 1:
        raise DataError(f"data.shift.step: {groups - 1} brightness steps of {step} leave no light")
    rng = np.random.default_rng(seed)

    def deal(y: np.ndarray) -> np.ndarray:
        out = np.empty(len(y), dtype=np.int64)
        for c in np.unique(y):
            rows = rng.permutation(np.flatnonzero(y == c))
            out[rows] = np.arange(len(rows)) % groups
        return out

    def shifted(x: np.ndarray, group: np.ndarray) -> np.ndarray:
        x = np.array(x, dtype=np.float32, copy=True)
        for g in range(1, groups):
            rows = group == g
            if type == "rotation":
                x[rows] = _rotated(x[rows], g * step)
            else:
                x[rows] *= 1.0 - g * step
        return x

    group_train, group_test = deal(ds.y_train), deal(ds.y_test)
    names = [f"rot{g * step:g}" for g in range(groups)] if type == "rotation" else _bright_names(groups, step)
    ds.x_train, ds.x_test = (
        shifted(np.asarray(ds.x_train), group_train),
        shifted(np.asarray(ds.x_test), group_test),
    )
    ds.group_train, ds.group_test, ds.group_names = group_train, group_test, names
    ds.meta = {**ds.meta, "shift": {"type": type, "groups": groups, "step": step, "seed": seed}}
    return ds


def _bright_names(groups: int, step: float) -> list[str]:
    """``bright100``, ``bright75`` …: each group's brightness in percent, whole percents when they tell the
    groups apart, else as many decimals as they need (``bright99.9``): a scenario finds its tasks' groups
    by name, and two groups of one name would be one group.

    >>> _bright_names(3, 0.25), _bright_names(3, 0.001)
    (['bright100', 'bright75', 'bright50'], ['bright100', 'bright99.9', 'bright99.8'])
    """
    for decimals in range(13):
        names = [f"bright{100 * (1 - g * step):.{decimals}f}" for g in range(groups)]
        if decimals:
            names = [n.rstrip("0").rstrip(".") for n in names]
        if len(set(names)) == groups:
            return names
    raise DataError(f"data.shift.step: {step:g} is too small to tell the groups' brightness apart")


def _rotated(images: np.ndarray, degrees: float) -> np.ndarray:
    """``(N, C, H, W)`` float images turned ``degrees`` counter-clockwise about their centre (Pillow,
    bilinear, the corners filled with 0), clipped to [0, 1]."""
    out = np.empty_like(images)
    for i in np.ndindex(images.shape[:2]):
        img = Image.fromarray(np.ascontiguousarray(images[i], dtype=np.float32), mode="F")
        out[i] = np.asarray(img.rotate(degrees, resample=Image.Resampling.BILINEAR, fillcolor=0.0))
    return np.clip(out, 0.0, 1.0)


def group_ids(
    train: np.ndarray, test: np.ndarray, source: str, name: str
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Sample-group labels (integers or strings, 1-D) → ids ``0 … G-1`` and the group names (sorted:
    numerically for integers, as text otherwise); :class:`DataError` naming the array otherwise. Byte
    strings are names as text (UTF-8), and every name is one the spec could write
    (:func:`~clgate.schemas.job.group_name_problem`)."""
    for split, a in (("train", train), ("test", test)):
        if a.ndim != 1 or a.dtype.kind not in "iuUS":
            raise DataError(
                f"{source}: {name}_{split} must be a 1-D array of integers or strings, "
                f"got {a.dtype} {a.shape}"
            )
    if (train.dtype.kind in "iu") != (test.dtype.kind in "iu"):
        raise DataError(f"{source}: {name}_train and {name}_test must both be integers or both strings")
    values, inverse = np.unique(np.concatenate([train, test]), return_inverse=True)
    try:
        names = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values.tolist()]
    except UnicodeDecodeError:
        raise DataError(
            f"{source}: {name}_train/{name}_test: byte-string group names must be UTF-8"
        ) from None
    for g, group in enumerate(names):
        problem = group_name_problem(group)
        if problem:
            split = "train" if (inverse[: len(train)] == g).any() else "test"
            raise DataError(f"{source}: {name}_{split}: {problem}")
    return inverse[: len(train)].astype(np.int64), inverse[len(train) :].astype(np.int64), names


CHANNEL_COUNTS = (1, 2, 3, 4)  # grey, grey+alpha, RGB, RGBA: what a channel axis of an image holds


def apply_layout(arrays: dict[str, np.ndarray], layout: str, source: str) -> dict[str, np.ndarray]:
    """4-D images to ``(N, C, H, W)``: transpose ``channels_last`` ones, refuse an obvious mismatch.

    A mismatch is a declared channel axis that holds more than 4 entries while the other end holds
    1 … 4 (``(N, 28, 28, 3)`` declared channels-first): read as is, the image would be scrambled.

    >>> x = np.zeros((2, 5, 5, 3), dtype=np.float32)
    >>> apply_layout({"x_train": x}, "channels_last", "d")["x_train"].shape
    (2, 3, 5, 5)
    >>> apply_layout({"x_train": x}, "channels_first", "d")
    Traceback (most recent call last):
    ...
    clgate.engine.errors.DataError: d: x_train has shape (2, 5, 5, 3): channels last (N, H, W, C), but data.layout is channels_first; set data.layout: channels_last
    """  # noqa: E501 - the doctest output line is the exact exception message
    out = dict(arrays)
    for name in ("x_train", "x_test"):
        a = arrays.get(name)
        if a is None or a.ndim != 4:
            continue
        first, last = a.shape[1], a.shape[3]
        if layout == "channels_first" and first not in CHANNEL_COUNTS and last in CHANNEL_COUNTS:
            raise DataError(
                f"{source}: {name} has shape {a.shape}: channels last (N, H, W, C), but data.layout is "
                "channels_first; set data.layout: channels_last"
            )
        if layout == "channels_last":
            if last not in CHANNEL_COUNTS and first in CHANNEL_COUNTS:
                raise DataError(
                    f"{source}: {name} has shape {a.shape}: channels first (N, C, H, W), but data.layout is "
                    "channels_last; set data.layout: channels_first"
                )
            out[name] = np.ascontiguousarray(a.transpose(0, 3, 1, 2))
    return out


def check_npz_limits(path: str | Path, *, max_bytes: int, max_samples: int) -> list[str]:
    """Why an ``.npz`` is too large to load (``[]`` when it is not), from its zip directory and ``.npy``
    headers only: a decompression bomb (a few MB inflating to GBs) is refused before anything is allocated.

    ``max_bytes`` bounds the decompressed total, ``max_samples`` the rows of each array.
    """
    path = Path(path)
    problems: list[str] = []
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            total = sum(info.file_size for info in infos)
            if total > max_bytes:
                problems.append(
                    f"{path.name}: decompresses to {total} bytes, more than {max_bytes} "
                    "(CLGATE_MAX_NPZ_BYTES)"
                )
            for info in infos:
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as member:
                    major, _minor = np.lib.format.read_magic(member)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if major == 1
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _fortran, _dtype = read(member)
                rows = shape[0] if shape else 1
                if rows > max_samples:
                    problems.append(
                        f"{path.name}: {info.filename[:-4]} has {rows} samples, more than {max_samples} "
                        "(CLGATE_MAX_SAMPLES)"
                    )
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return problems  # not an archive, or a damaged one: the loader says why
    return problems


def check_image_folder_limits(
    path: str | Path, *, size: tuple[int, int], color: str, max_bytes: int, max_samples: int
) -> list[str]:
    """Why an image folder is too large to load (``[]`` when it is not), from file counts and image headers
    only: more than ``max_samples`` images, decoded arrays over ``max_bytes``, or one image whose header
    declares more pixels than Pillow's decompression-bomb limit (refused before it is decoded). The files
    of either layout are counted — ``<split>/<class>/*`` and a grouped folder's ``<split>/<group>/<class>/*``
    — so a stray file at the other depth counts too: the safe side.
    """
    root = Path(path)
    problems: list[str] = []
    files = [
        f
        for split in ("train", "test")
        if (root / split).is_dir()
        for pattern in ("*/*", "*/*/*")
        for f in (root / split).glob(pattern)
        if f.is_file() and not f.name.startswith(".")
    ]
    if len(files) > max_samples:
        problems.append(f"{root.name}: {len(files)} images, more than {max_samples} (CLGATE_MAX_SAMPLES)")
    decoded = len(files) * size[0] * size[1] * (1 if color == "L" else 3)  # uint8, as batches are read
    if decoded > max_bytes:
        problems.append(
            f"{root.name}: {decoded} bytes once decoded, more than {max_bytes} (CLGATE_MAX_NPZ_BYTES)"
        )
    limit = Image.MAX_IMAGE_PIXELS or 89_478_485
    for f in files[:max_samples]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(f) as img:  # reads the header only
                    width, height = img.size
        except Image.DecompressionBombError as exc:
            problems.append(f"{f.name}: {exc} (decompression bomb)")
            break
        except Exception:
            continue
        if width * height > limit:
            problems.append(f"{f.name}: {width}x{height} pixels, more than {limit} (decompression bomb)")
            break
    return problems


def load_npz(path: str | Path, *, layout: str = "channels_first", groups: str = "group") -> Dataset:
    """``x_train, y_train, x_test, y_test`` (+ optional ``class_names``) from an ``.npz``; no pickles.

    ``layout`` is how 4-D images are stored (see :func:`apply_layout`); the result is channels-first.
    ``<groups>_train`` and ``<groups>_test``, when present, give each sample's group (NI/NIC scenarios).
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise DataError(f"{source}: no such file")
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{source}: not a readable .npz file ({exc})") from None
    if not hasattr(archive, "files"):
        raise DataError(
            f"{source}: not an .npz archive (a single .npy array?); expected x_train, y_train, x_test, y_test"
        )
    with archive:
        missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in archive.files]
        if missing:
            raise DataError(
                f"{source}: missing array(s) {', '.join(missing)} (found: "
                f"{', '.join(archive.files) or 'none'})"
            )
        try:
            arrays = {k: _npz_member(path, k, archive) for k in ("x_train", "y_train", "x_test", "y_test")}
            names = archive["class_names"] if "class_names" in archive.files else None
            group_keys = (f"{groups}_train", f"{groups}_test")
            present = [k for k in group_keys if k in archive.files]
            if len(present) == 1:
                raise DataError(
                    f"{source}: has {present[0]} but not {(set(group_keys) - set(present)).pop()}"
                )
            raw_groups = [archive[k] for k in group_keys] if present else None
        except ValueError as exc:  # object arrays need pickle: refused
            raise DataError(
                f"{source}: {exc} (object arrays are refused; store numbers and strings)"
            ) from None
    if names is not None:
        if names.ndim != 1 or names.dtype.kind not in "US":
            raise DataError(
                f"{source}: class_names must be a 1-D array of strings, got {names.dtype} {names.shape}"
            )
        names = [str(n) for n in names.tolist()]
    arrays = apply_layout(arrays, layout, source)
    ds = validate_arrays(
        arrays["x_train"], arrays["y_train"], arrays["x_test"], arrays["y_test"], names, source
    )
    if arrays["x_train"].ndim == 4:
        ds.meta = {**ds.meta, "layout": layout}
    if raw_groups is not None:  # their shape and names first: a 0-d array has no length to compare
        ds.group_train, ds.group_test, ds.group_names = group_ids(
            raw_groups[0], raw_groups[1], source, groups
        )
        for split, a, y in (("train", ds.group_train, ds.y_train), ("test", ds.group_test, ds.y_test)):
            if len(a) != len(y):
                raise DataError(
                    f"{source}: {groups}_{split} has {len(a)} entries for the {split} set's {len(y)} samples"
                )
    return ds


def _npz_member(path: Path, key: str, archive: Any) -> np.ndarray:
    """One array of an ``.npz``: memory-mapped (copy-on-write, paged in on use) when the member is stored
    uncompressed (``np.savez``), read whole otherwise (``np.savez_compressed``)."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(f"{key}.npy")
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                return archive[key]
            with path.open("rb") as f:
                f.seek(info.header_offset)
                local = f.read(30)
                if local[:4] != b"PK\x03\x04":
                    return archive[key]
                name_len, extra_len = (
                    int.from_bytes(local[26:28], "little"),
                    int.from_bytes(local[28:30], "little"),
                )
                start = info.header_offset + 30 + name_len + extra_len
                f.seek(start)
                version = np.lib.format.read_magic(f)
                read_header = {
                    (1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0,
                }
                if version not in read_header:
                    return archive[key]
                shape, fortran, dtype = read_header[version](f)
                offset = f.tell()
            if (
                dtype.hasobject
                or fortran
                or offset - start + dtype.itemsize * int(np.prod(shape)) > info.file_size
            ):
                return archive[key]  # object arrays: refused by the reader; odd layouts: read whole
            return np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=tuple(shape), order="C")
    except (KeyError, OSError, ValueError, zipfile.BadZipFile):
        return archive[key]


def load_image_folder(
    path: str | Path, *, size: tuple[int, int] = (32, 32), color: str = "RGB", grouped: bool = False
) -> Dataset:
    """``train/<class>/*`` and ``test/<class>/*`` → ``(N, C, H, W)`` uint8 images, read lazily.

    Classes are the sub-folder names of ``train/`` in sorted order; ``test/`` must have the same. The
    inputs are :class:`~clgate.engine.samples.ImageFiles`: paths, decoded (converted to ``color`` and
    resized to ``size``) when a batch is read. Each file's header is read now, so that a file that is not
    an image is refused before training; a file whose pixels cannot be decoded is refused when it is read.
    ``grouped``: ``train/<group>/<class>/*`` and ``test/<group>/<class>/*``, one folder per sample group.
    """
    if grouped:
        return _load_grouped_image_folder(Path(path), size=size, color=color)
    root = Path(path)
    for split in ("train", "test"):
        if not (root / split).is_dir():
            raise DataError(f"{root}: missing folder {split}/ (expected {split}/<class>/<image files>)")
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    test_classes = sorted(p.name for p in (root / "test").iterdir() if p.is_dir())
    if not classes:
        raise DataError(f"{root / 'train'}: no class folders")
    if set(test_classes) != set(classes):
        only_train = sorted(set(classes) - set(test_classes))
        only_test = sorted(set(test_classes) - set(classes))
        parts = []
        if only_train:
            parts.append(f"class(es) {', '.join(only_train)} have no test/ folder (no test samples)")
        if only_test:
            parts.append(f"class(es) {', '.join(only_test)} are in test/ but not in train/")
        raise DataError(f"{root}: train/test class mismatch: " + "; ".join(parts))
    out: dict[str, Any] = {}
    for split in ("train", "test"):
        paths: list[Path] = []
        ys: list[int] = []
        for label, name in enumerate(classes):
            files = sorted(
                p for p in (root / split / name).iterdir() if p.is_file() and not p.name.startswith(".")
            )
            if not files:
                raise DataError(
                    f"{root / split / name}: no image files (class {name!r} has no {split} samples)"
                )
            for f in files:
                _check_image_header(f)
            paths.extend(files)
            ys.extend([label] * len(files))
        out[f"x_{split}"] = ImageFiles(paths, size=(int(size[0]), int(size[1])), color=color)
        out[f"y_{split}"] = np.asarray(ys, dtype=np.int64)
    ds = validate_arrays(out["x_train"], out["y_train"], out["x_test"], out["y_test"], classes, str(root))
    ds.meta = {"size": list(size), "color": color}
    return ds


def _grouped_layout(root: Path) -> tuple[list[str], list[str]]:
    """The group folder names and class folder names of a grouped image folder (both sorted), checked:
    every group of ``test/`` is in ``train/`` (else its held-out images would be silently left out), every
    name can be a group's, and every group folder holds class folders (a flat folder read as grouped)."""
    layout = "expected {split}/<group>/<class>/<image files>"
    for split in ("train", "test"):
        if not (root / split).is_dir():
            raise DataError(f"{root}: missing folder {split}/ ({layout.format(split=split)})")
    groups = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    if not groups:
        raise DataError(f"{root / 'train'}: no group folders ({layout.format(split='train')})")
    test_only = sorted({p.name for p in (root / "test").iterdir() if p.is_dir()} - set(groups))
    if test_only:
        raise DataError(f"{root}: group(s) {', '.join(test_only)} are in test/ but not in train/")
    for group in groups:
        problem = group_name_problem(group)
        if problem:
            raise DataError(f"{root / 'train'}: group folder {problem}")
        if not any(c.is_dir() for c in (root / "train" / group).iterdir()):
            raise DataError(
                f"{root / 'train' / group}: no class folders ({layout.format(split='train')}; "
                "for train/<class>/<image files> set data.grouped: false)"
            )
    classes = sorted({c.name for g in groups for c in (root / "train" / g).iterdir() if c.is_dir()})
    return groups, classes


def _load_grouped_image_folder(root: Path, *, size: tuple[int, int], color: str) -> Dataset:
    """``train/<group>/<class>/*`` and ``test/<group>/<class>/*``: classes are the class folder names of
    every group (sorted), groups the group folder names (sorted); a group need not hold every class, but
    a class folder it has holds images (an empty one is a layout one level off)."""
    groups, classes = _grouped_layout(root)
    label = {name: i for i, name in enumerate(classes)}
    out: dict[str, Any] = {}
    for split in ("train", "test"):
        paths: list[Path] = []
        ys: list[int] = []
        gs: list[int] = []
        for gi, group in enumerate(groups):
            folder = root / split / group
            if not folder.is_dir():
                raise DataError(f"{folder}: missing (group {group!r} has no {split} samples)")
            for class_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
                if class_dir.name not in label:
                    raise DataError(f"{class_dir}: class {class_dir.name!r} is in no train/<group>/ folder")
                files = sorted(p for p in class_dir.iterdir() if p.is_file() and not p.name.startswith("."))
                if not files:
                    raise DataError(
                        f"{class_dir}: no image files (expected {split}/<group>/<class>/<image files>; "
                        "leave out the folder of a class the group does not hold)"
                    )
                for f in files:
                    _check_image_header(f)
                paths.extend(files)
                ys.extend([label[class_dir.name]] * len(files))
                gs.extend([gi] * len(files))
        out[f"x_{split}"] = ImageFiles(paths, size=(int(size[0]), int(size[1])), color=color)
        out[f"y_{split}"] = np.asarray(ys, dtype=np.int64)
        out[f"g_{split}"] = np.asarray(gs, dtype=np.int64)
    ds = validate_arrays(out["x_train"], out["y_train"], out["x_test"], out["y_test"], classes, str(root))
    ds.meta = {"size": list(size), "color": color, "grouped": True}
    ds.group_train, ds.group_test, ds.group_names = out["g_train"], out["g_test"], groups
    return ds


def _check_image_header(path: Path) -> None:
    """Refuse a file that is not an image Pillow can open (its header only is read)."""
    try:
        with Image.open(path) as img:
            img.size  # noqa: B018 - the header is parsed on open; size is what it declares
    except DECODE_ERRORS as exc:
        raise DataError(f"{path}: cannot decode image ({exc})") from None


def make_synthetic(
    *,
    n_classes: int = 6,
    n_features: int = 16,
    train_per_class: int = 50,
    test_per_class: int = 20,
    separation: float = 3.0,
    seed: int = 0,
) -> Dataset:
    """Gaussian clusters, one per class, centres ``separation`` apart on average; deterministic."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, separation / np.sqrt(2.0), size=(n_classes, n_features))

    def draw(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(n_classes), per_class)
        x = centres[y] + rng.normal(size=(len(y), n_features))
        return x.astype(np.float32), y.astype(np.int64)

    x_train, y_train = draw(train_per_class)
    x_test, y_test = draw(test_per_class)
    ds = validate_arrays(x_train, y_train, x_test, y_test, None, "synthetic")
    ds.meta = {"seed": seed, "separation": separation}
    return ds

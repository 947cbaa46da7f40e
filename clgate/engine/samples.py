"""Training samples read per batch: what a task trains on, from wherever its data lies.

The data of a job stays on the host in its stored dtype — a numpy array, a memory-mapped ``.npz``
member, or an image folder decoded lazily (:class:`ImageFiles`). A task, the cumulative data of
``joint`` or a strategy's memory is a :class:`Samples`: a source and the indices of its samples.
:func:`iterate_batches` reads the batches of an update plan: directly from arrays (one fancy index per
batch), through a :class:`torch.utils.data.DataLoader` with worker processes for image folders (decoding
overlaps training), or by indexing tensors already on the device (a replay memory). Only batches go to
the device, converted there to model input (:func:`model_input`).

>>> x = np.arange(12, dtype=np.float32).reshape(6, 2); y = np.array([0, 0, 1, 1, 2, 2])
>>> task = Samples(x, y).where_label([1, 2])
>>> len(task), task.labels.tolist()
(4, [1, 1, 2, 2])
>>> [yb.tolist() for _, yb in iterate_batches(task, [torch.tensor([3, 0])], torch.device("cpu"))]
[[2, 1]]
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from clgate.engine.errors import DataError

#: what Pillow raises for a file it cannot open or decode (UnidentifiedImageError is an OSError)
DECODE_ERRORS = (OSError, ValueError, Image.DecompressionBombError)

#: decoded images per worker task when a whole selection of images is read (evaluation samples, digests)
READ_CHUNK = 256


class ImageFiles:
    """Image files decoded on access into ``(C, H, W)`` uint8 arrays: an array-like of shape
    ``(N, C, H, W)`` that holds paths, not pixels.

    Indexing with an int gives one image, with a slice or an index array a stacked ``uint8`` array;
    nothing is cached. A file that cannot be decoded raises :class:`DataError` naming it.
    """

    dtype = np.dtype(np.uint8)
    ndim = 4

    def __init__(self, paths: Sequence[Path], *, size: tuple[int, int], color: str) -> None:
        self.paths = list(paths)
        self.size = (int(size[0]), int(size[1]))
        self.color = color
        channels = 1 if color == "L" else 3
        self.shape: tuple[int, ...] = (len(self.paths), channels, *self.size)

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def nbytes(self) -> int:
        """Bytes of the decoded images (none of them is held)."""
        return math.prod(self.shape)

    def decode(self, i: int) -> np.ndarray:
        path = self.paths[i]
        try:
            with Image.open(path) as src:
                img = src.convert(self.color).resize((self.size[1], self.size[0]), Image.Resampling.BILINEAR)
                a = np.asarray(img, dtype=np.uint8)
        except DECODE_ERRORS as exc:
            raise DataError(f"{path}: cannot decode image ({exc})") from None
        return a[None] if a.ndim == 2 else np.ascontiguousarray(a.transpose(2, 0, 1))

    def __getitem__(self, idx: Any) -> np.ndarray:
        if isinstance(idx, (int, np.integer)):
            return self.decode(int(idx))
        if isinstance(idx, slice):
            positions: Iterable[int] = range(*idx.indices(len(self)))
        else:
            positions = np.asarray(idx, dtype=np.int64).reshape(-1).tolist()
        out = [self.decode(i) for i in positions]
        if not out:
            return np.empty((0, *self.shape[1:]), dtype=np.uint8)
        return np.stack(out)

    def read(self, idx: np.ndarray, *, workers: int | None = None) -> np.ndarray:
        """The images at ``idx`` as one uint8 array, decoded by ``workers`` processes (default
        :func:`default_workers`) in chunks of :data:`READ_CHUNK`."""
        idx = np.asarray(idx, dtype=np.int64)
        out = np.empty((len(idx), *self.shape[1:]), dtype=np.uint8)
        chunks = [np.arange(s, min(s + READ_CHUNK, len(idx))) for s in range(0, len(idx), READ_CHUNK)]
        source = Samples(self, np.zeros(len(self), dtype=np.int64), idx)
        for where, (xb, _) in zip(chunks, _load(source, chunks, workers=workers, pin=False), strict=True):
            out[where] = xb.numpy()
        return out

    def digest_into(self, h: Any) -> None:
        """Feed the files' bytes (streamed), their count and the decode settings into hash ``h``."""
        h.update(f"{self.shape}{self.color}".encode())
        for path in self.paths:
            with path.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)


Source = np.ndarray | ImageFiles | torch.Tensor


class Samples:
    """Samples ``index`` of a source ``x`` (with labels ``y`` over the whole source), read per batch.

    ``x``: an array (a memory map too), :class:`ImageFiles`, or a tensor (host or device); ``y``: the
    source's labels; ``index``: which of its samples, in order (``None``: all). Positions passed to
    :meth:`take` and the batch plans of :func:`iterate_batches` count within these samples.
    """

    def __init__(self, x: Source, y: np.ndarray | torch.Tensor, index: np.ndarray | None = None) -> None:
        if len(x) != len(y):
            raise ValueError(f"Samples: {len(x)} inputs but {len(y)} labels")
        self.x = x
        self.y = y
        self.index = np.arange(len(y), dtype=np.int64) if index is None else np.asarray(index, np.int64)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def labels(self) -> torch.Tensor:
        """The samples' labels, on the host (int64)."""
        return self._labels_at(self.index).cpu()

    def _labels_at(self, rows: np.ndarray) -> torch.Tensor:
        if isinstance(self.y, torch.Tensor):
            return self.y[torch.from_numpy(rows).to(self.y.device)].long()
        return torch.from_numpy(np.asarray(self.y)[rows].astype(np.int64))

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def input_nbytes(self) -> int:
        """Bytes of these samples as the model takes them (uint8 images as float32), int64 labels
        included: the unit of ``train_bytes`` and of a replay memory's ``buffer_bytes`` in the log,
        whatever the storage holds."""
        itemsize = self.x.element_size() if isinstance(self.x, torch.Tensor) else self.x.dtype.itemsize
        if str(self.x.dtype).endswith("uint8"):
            itemsize = 4
        return len(self) * (math.prod(self.sample_shape) * itemsize + 8)

    def where_label(self, classes: Iterable[int]) -> Samples:
        """The samples whose label is in ``classes`` (a task's), in source order."""
        keep = np.isin(self.labels.numpy(), list(classes))
        return Samples(self.x, self.y, self.index[keep])

    def __add__(self, other: Samples) -> Samples:
        """The samples of both (same source), these first: ``joint``'s cumulative data."""
        if other.x is not self.x or other.y is not self.y:
            raise ValueError("Samples: only samples of one source can be joined")
        return Samples(self.x, self.y, np.concatenate([self.index, other.index]))

    def take(self, positions: torch.Tensor | np.ndarray | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (stored dtype) and labels of the samples at ``positions``: on the source's device for a
        tensor source, on the host otherwise."""
        rows = self.index[np.asarray(positions, dtype=np.int64).reshape(-1)]
        if isinstance(self.x, torch.Tensor):
            return self.x[torch.from_numpy(rows).to(self.x.device)], self._labels_at(rows)
        return torch.from_numpy(np.ascontiguousarray(self.x[rows])), self._labels_at(rows)


def default_workers() -> int:
    """Worker processes that decode images: the CPUs this process may use, less one for training, at
    most 8 (``CLGATE_DATA_WORKERS`` overrides; 0 decodes in the training process)."""
    env = os.environ.get("CLGATE_DATA_WORKERS")
    if env is not None and env.strip().isdigit():
        return int(env)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus - 1))


def model_input(x: Any) -> Any:
    """A batch as the model takes it: uint8 images → float32 in [0, 1] (÷ 255); anything else as is.

    Works on torch tensors (on any device, so only the batch is converted there) and numpy arrays.

    >>> import torch
    >>> model_input(torch.tensor([[0, 51, 255]], dtype=torch.uint8))
    tensor([[0.0000, 0.2000, 1.0000]])
    """
    if getattr(x, "dtype", None) is not None and str(x.dtype).endswith("uint8"):
        if isinstance(x, np.ndarray):
            return x.astype(np.float32) / np.float32(255.0)
        return x.float().div_(255.0)
    return x


def iterate_batches(
    samples: Samples,
    plan: Iterable[torch.Tensor],
    device: torch.device,
    *,
    workers: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Model-input batches ``(x, y)`` on ``device`` for the positions of each entry of ``plan``.

    Image folders are decoded by ``workers`` processes (default :func:`default_workers`) a few batches
    ahead of training; arrays are indexed in this process; tensors on the device are indexed there.
    ``plan`` is consumed as the batches are read (with workers, a few batches ahead).
    """
    if isinstance(samples.x, ImageFiles):
        host: Iterable[tuple[torch.Tensor, torch.Tensor]] = _load(
            samples, plan, workers=workers, pin=device.type == "cuda"
        )
    else:
        host = (samples.take(p) for p in plan)
    for xb, yb in host:
        yield (
            model_input(xb.to(device, non_blocking=True)),
            yb.to(device, non_blocking=True),
        )


class _Batches(torch.utils.data.Dataset[Any]):
    """A map-style data set whose items are whole batches: item ``positions`` → stored-dtype arrays.

    A decoding error travels back as a value (the loader re-raises it in the training process as a
    :class:`DataError` with the worker's message, not as a wrapped traceback).
    """

    def __init__(self, samples: Samples) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, positions: Any) -> Any:
        try:
            return self.samples.take(positions)
        except DataError as exc:
            return str(exc)


def _as_is(item: Any) -> Any:
    return item


def _load(
    samples: Samples, plan: Iterable[Any], *, workers: int | None, pin: bool
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    n_workers = default_workers() if workers is None else workers
    loader = torch.utils.data.DataLoader(
        _Batches(samples),
        sampler=plan,  # any iterable of keys; each key is a batch
        batch_size=None,
        num_workers=n_workers,
        pin_memory=pin,
        prefetch_factor=4 if n_workers else None,
        collate_fn=_as_is,
    )
    for item in loader:
        if isinstance(item, str):
            raise DataError(item)
        yield item

"""The messages between the trusted side of a job and the process that runs the submitted model.

A frame is a 4-byte big-endian header length, a JSON header (an object with a ``type``) of at most
:data:`MAX_HEADER_BYTES`, and, for a ``point``, the predictions: ``n`` little-endian integers of the
dtype the trusted side chose (:func:`prediction_dtype`), one per staged held-out sample, each the class
index the model predicts (``-1``: no prediction, e.g. a NaN logit).

The child writes frames to its standard output (its own prints go to standard error) and reads the
trusted side's frames (only ``stop``) from its standard input. The reader never trusts a length: a
header over the bound, a payload of another size than the trusted side expects, or bytes that do not
parse end the job with :class:`ProtocolError`.

>>> import io
>>> buf = io.BytesIO()
>>> write_frame(buf, {"type": "point", "iteration": 5}, np.array([2, -1, 0], dtype="<i2"))
>>> reader = FrameReader(prediction_dtype(3), expected_n=3)
>>> reader.feed(buf.getvalue())
>>> header, preds = reader.next_frame()
>>> header["type"], preds.tolist()
('point', [2, -1, 0])
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

import numpy as np

from clgate.engine.errors import EngineInputError

MAX_HEADER_BYTES = 1 << 20
_LENGTH = struct.Struct(">I")

#: Messages the child may send (``point`` carries predictions); the trusted side sends only ``stop``.
CHILD_MESSAGES = frozenset(
    {"hello", "seed_start", "point", "task_done", "progress", "seed_end", "diverged", "stopped", "error"}
)


class ProtocolError(EngineInputError):
    """The model's process broke the evaluation protocol (garbage, a message out of place, a wrong
    number of predictions, a class index out of range) or ended before the job did."""


def prediction_dtype(n_classes: int) -> np.dtype:
    """The smallest little-endian signed integer that holds ``-1 … n_classes - 1``.

    >>> str(prediction_dtype(10)), str(prediction_dtype(40000))
    ('int16', 'int32')
    """
    return np.dtype("<i2") if n_classes <= np.iinfo(np.int16).max else np.dtype("<i4")


def encode_frame(header: dict[str, Any], payload: np.ndarray | None = None) -> bytes:
    """One frame's bytes; ``payload`` (predictions) sets ``n`` in the header."""
    if payload is not None:
        header = {**header, "n": int(payload.size)}
    raw = json.dumps(header, separators=(",", ":")).encode()
    body = payload.tobytes() if payload is not None else b""
    return _LENGTH.pack(len(raw)) + raw + body


def write_frame(stream: BinaryIO, header: dict[str, Any], payload: np.ndarray | None = None) -> None:
    stream.write(encode_frame(header, payload))
    stream.flush()


class FrameReader:
    """Frames out of a byte stream fed in pieces; every length and type checked before it is used.

    ``expected_n``: the number of predictions a ``point`` must carry (the staged held-out samples);
    ``max_header_bytes``: the largest header accepted (at most :data:`MAX_HEADER_BYTES`), ``bound`` the
    name the refusal gives it (the setting it comes from).
    """

    def __init__(
        self,
        dtype: np.dtype,
        *,
        expected_n: int,
        max_header_bytes: int = MAX_HEADER_BYTES,
        bound: str = "the protocol's bound",
    ) -> None:
        self.dtype = np.dtype(dtype)
        self.expected_n = expected_n
        self.max_header_bytes = min(max_header_bytes, MAX_HEADER_BYTES)
        self.bound = bound if max_header_bytes < MAX_HEADER_BYTES else "the protocol's bound"
        self._buf = bytearray()
        self._header: dict[str, Any] | None = None

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> tuple[dict[str, Any], np.ndarray | None] | None:
        """The next complete frame, or ``None`` until more bytes come."""
        if self._header is None:
            if len(self._buf) < _LENGTH.size:
                return None
            (length,) = _LENGTH.unpack_from(self._buf)
            if length > self.max_header_bytes:
                limit, bound = self.max_header_bytes, self.bound
                raise ProtocolError(f"a message header of {length} bytes (at most {limit} bytes: {bound})")
            if len(self._buf) < _LENGTH.size + length:
                return None
            self._header = _parse_header(bytes(self._buf[_LENGTH.size : _LENGTH.size + length]))
            del self._buf[: _LENGTH.size + length]
        header = self._header
        if header["type"] != "point":
            self._header = None
            return header, None
        n = header.get("n")
        if type(n) is not int or n != self.expected_n:
            raise ProtocolError(
                f"a point with {n!r} predictions; {self.expected_n} held-out samples were sent"
            )
        size = n * self.dtype.itemsize
        if len(self._buf) < size:
            return None
        preds = np.frombuffer(self._buf, dtype=self.dtype, count=n).copy()
        del self._buf[:size]
        self._header = None
        return header, preds


def _parse_header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("a message that is not JSON") from None
    if not isinstance(header, dict) or header.get("type") not in CHILD_MESSAGES:
        kind = header.get("type") if isinstance(header, dict) else type(header).__name__
        raise ProtocolError(f"an unknown message {str(kind)[:40]!r}")
    return header


def check_predictions(preds: np.ndarray, n_classes: int) -> None:
    """Every prediction is ``-1`` (none) or a class index ``0 … n_classes - 1``."""
    if preds.size and (int(preds.min()) < -1 or int(preds.max()) >= n_classes):
        raise ProtocolError(
            f"predictions out of range: {int(preds.min())} … {int(preds.max())} "
            f"(class indices 0 … {n_classes - 1}, or -1)"
        )


def field(header: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``header[name]``, checked to be of ``kind`` (``bool`` is never an ``int`` here)."""
    value = header.get(name)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise ProtocolError(f"{header.get('type')}: {name} is {str(value)[:40]!r}, not {kinds[0].__name__}")
    return value

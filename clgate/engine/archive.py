"""Safe extraction of an uploaded image-folder archive (tar or zip) for the ``image_folder`` loader.

An archive from a client is hostile until checked. :func:`safe_extract` refuses, before writing
anything, every entry that could escape or abuse the target folder:

- absolute paths (``/etc/x``, ``C:\\x``, ``\\\\server\\x``) and any ``..`` component;
- symbolic and hard links, device files, FIFOs (only regular files and folders are extracted);
- more entries, or more bytes uncompressed in total, than its :class:`ArchiveLimits` allow (zip and tar
  bombs), or a compression ratio above their ``max_ratio`` (a zip entry's, or a compressed tar stream's
  declared total over the archive's size: a ``.tar.gz`` of zeros is refused from its listing, before
  a byte is written);
- names with NUL or control characters, or two entries that map to the same path.

Files are then written one by one, streaming with a running byte count (a tar member that lies
about its size cannot overrun the budget), into ``dest`` (created, must be empty). The result is the
folder to give the loader: ``dest`` itself, or its single top-level folder when the archive wraps
everything in one (``mydata/train/...``).

>>> import io, tarfile, tempfile, pathlib
>>> buf = io.BytesIO()
>>> with tarfile.open(fileobj=buf, mode="w") as tf:
...     info = tarfile.TarInfo("../evil.txt"); info.size = 1
...     tf.addfile(info, io.BytesIO(b"x"))
>>> _ = buf.seek(0)
>>> with tempfile.TemporaryDirectory() as d:
...     safe_extract(buf, pathlib.Path(d) / "out")
Traceback (most recent call last):
...
clgate.engine.archive.ArchiveError: archive entry '../evil.txt': '..' in the path (entries must stay inside the archive)
"""  # noqa: E501 - the doctest output line is the exact exception message

from __future__ import annotations

import re
import shutil
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, Literal

from clgate.engine.data import MAX_DATA_BYTES, MAX_SAMPLES
from clgate.engine.errors import DataError

FOLDER_ENTRIES = 10_000  # entries an archive may hold beside its images: split and class folders, stray files
MAX_RATIO = 200  # uncompressed / compressed: per zip entry, and over a whole tar stream
_CHUNK = 1 << 20
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f]")


class ArchiveError(DataError):
    """An archive refused for safety or malformed; the message names the entry and the reason."""


@dataclass(frozen=True)
class ArchiveLimits:
    """The bounds an image-folder archive is judged against — the same where it is submitted (the API,
    :func:`check_archive`) and where it is extracted (the worker, :func:`safe_extract`), because both take
    them from the data limits (:meth:`following`): ``max_bytes`` uncompressed in total is
    ``CLGATE_MAX_NPZ_BYTES`` (the decompressed size a data set may have, so also the job's disk quota for
    the extracted folder), ``max_files`` entries is ``CLGATE_MAX_SAMPLES`` images plus
    :data:`FOLDER_ENTRIES`. The defaults are those settings' defaults."""

    max_bytes: int = MAX_DATA_BYTES
    max_files: int = MAX_SAMPLES + FOLDER_ENTRIES
    max_ratio: float = MAX_RATIO

    @classmethod
    def following(cls, *, max_bytes: int, max_samples: int) -> ArchiveLimits:
        """The bounds for data limits of ``max_bytes`` (``CLGATE_MAX_NPZ_BYTES``) and ``max_samples``
        (``CLGATE_MAX_SAMPLES``)."""
        return cls(max_bytes=max_bytes, max_files=max_samples + FOLDER_ENTRIES)


DEFAULT_LIMITS = ArchiveLimits()
_FILES_SETTING = f"CLGATE_MAX_SAMPLES + {FOLDER_ENTRIES} for folders"
_BYTES_SETTING = "CLGATE_MAX_NPZ_BYTES"


@dataclass(frozen=True)
class _Entry:
    name: str  # normalised relative POSIX path
    is_dir: bool
    size: int


def _normalise(raw: str) -> str:
    where = f"archive entry {raw!r}"
    if _BAD_CHARS.search(raw):
        raise ArchiveError(f"{where}: control characters in the name")
    name = raw.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise ArchiveError(f"{where}: absolute path (entries must be relative)")
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"{where}: '..' in the path (entries must stay inside the archive)")
    if not parts:
        raise ArchiveError(f"{where}: empty path")
    return "/".join(parts)


def archive_kind(data: BinaryIO) -> Literal["zip", "tar"]:
    """``zip`` or ``tar`` (plain, gzip, bz2 or xz) from the bytes; :class:`ArchiveError` otherwise."""
    pos = data.tell()
    try:
        if zipfile.is_zipfile(data):
            return "zip"
        data.seek(pos)
        try:
            with tarfile.open(fileobj=data, mode="r:*"):
                return "tar"
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ArchiveError(f"not a zip or tar archive ({exc})") from None
    finally:
        data.seek(pos)


def safe_extract(
    source: str | Path | BinaryIO,
    dest: str | Path,
    *,
    limits: ArchiveLimits = DEFAULT_LIMITS,
) -> Path:
    """Check every entry of a zip/tar archive against ``limits``, then extract it into the new folder
    ``dest``.

    Returns the data root (``dest``, or its only top-level folder). Raises :class:`ArchiveError`
    (a :class:`~clgate.engine.errors.DataError`) naming the entry and the reason; on any error the
    partly written ``dest`` is removed.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ArchiveError(f"{dest}: extraction target exists and is not an empty folder")
    opened = open(source, "rb") if isinstance(source, (str, Path)) else None  # noqa: SIM115
    data: BinaryIO = opened if opened is not None else source  # type: ignore[assignment]
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if archive_kind(data) == "zip":
            _extract_zip(data, dest, limits)
        else:
            _extract_tar(data, dest, limits)
    except BaseException:
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        raise
    finally:
        if opened is not None:
            opened.close()
    top = list(dest.iterdir())
    return top[0] if len(top) == 1 and top[0].is_dir() and not (dest / "train").exists() else dest


def _check_plan(entries: list[_Entry], limits: ArchiveLimits) -> None:
    if len(entries) > limits.max_files:
        raise ArchiveError(
            f"archive: {len(entries)} entries, more than the limit of {limits.max_files} ({_FILES_SETTING})"
        )
    total = sum(e.size for e in entries)
    if total > limits.max_bytes:
        raise ArchiveError(
            f"archive: {total} bytes uncompressed, more than the limit of {limits.max_bytes} "
            f"({_BYTES_SETTING})"
        )
    seen: dict[str, bool] = {}
    for e in entries:
        key = e.name.lower()  # case-insensitive file systems would merge these
        if key in seen and not (e.is_dir and seen[key]):
            raise ArchiveError(f"archive entry {e.name!r}: appears more than once")
        seen[key] = e.is_dir
    files = {e.name for e in entries if not e.is_dir}
    for name in files:
        parent = PurePosixPath(name).parent
        while str(parent) != ".":
            if str(parent) in files:
                raise ArchiveError(f"archive entry {name!r}: its folder {str(parent)!r} is also a file")
            parent = parent.parent


def _write(dest: Path, name: str, stream: IO[bytes], budget: list[int]) -> None:
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("xb") as out:
        while chunk := stream.read(_CHUNK):
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise ArchiveError(
                    f"archive entry {name!r}: more bytes than declared (archive over the size limit, "
                    f"{_BYTES_SETTING})"
                )
            out.write(chunk)


def _extract_zip(data: BinaryIO, dest: Path, limits: ArchiveLimits) -> None:
    try:
        zf = zipfile.ZipFile(data)
    except zipfile.BadZipFile as exc:
        raise ArchiveError(f"not a readable zip archive ({exc})") from None
    with zf:
        entries = _zip_entries(zf, limits)
        budget = [limits.max_bytes]
        for entry, info in entries:
            if entry.is_dir:
                (dest / entry.name).mkdir(parents=True, exist_ok=True)
                continue
            try:
                with zf.open(info) as stream:
                    _write(dest, entry.name, stream, budget)
            except (zipfile.BadZipFile, OSError, EOFError) as exc:
                raise ArchiveError(f"archive entry {info.filename!r}: cannot read ({exc})") from None


def _zip_entries(zf: zipfile.ZipFile, limits: ArchiveLimits) -> list[tuple[_Entry, zipfile.ZipInfo]]:
    """Every entry of ``zf``, checked against the rules and limits (nothing is read but the directory)."""
    entries: list[tuple[_Entry, zipfile.ZipInfo]] = []
    max_ratio = limits.max_ratio
    for info in zf.infolist():
        name = _normalise(info.filename)
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            what = "a symbolic link" if kind == stat.S_IFLNK else "not a regular file"
            raise ArchiveError(
                f"archive entry {info.filename!r}: {what} (only files and folders are extracted)"
            )
        if info.flag_bits & 0x1:
            raise ArchiveError(f"archive entry {info.filename!r}: encrypted")
        if not info.is_dir() and info.compress_size and info.file_size / info.compress_size > max_ratio:
            raise ArchiveError(
                f"archive entry {info.filename!r}: compression ratio "
                f"{info.file_size / info.compress_size:.0f}:1 "
                f"above {max_ratio:.0f}:1 (a zip bomb?)"
            )
        entries.append((_Entry(name, info.is_dir(), info.file_size), info))
    _check_plan([e for e, _ in entries], limits)
    return entries


def _stream_size(data: BinaryIO) -> int:
    pos = data.tell()
    try:
        return data.seek(0, 2) - pos
    finally:
        data.seek(pos)


def _check_tar_ratio(declared: int, compressed: int, max_ratio: float, name: str) -> None:
    """A tar stream whose declared content outgrows ``max_ratio`` times the archive's size (a tar bomb)."""
    if compressed and declared / compressed > max_ratio:
        raise ArchiveError(
            f"archive entry {name!r}: the archive expands to more than {declared} bytes from {compressed}, "
            f"a compression ratio above {max_ratio:.0f}:1 (a tar bomb?)"
        )


def _tar_entries(
    tf: tarfile.TarFile, compressed: int, limits: ArchiveLimits
) -> list[tuple[_Entry, tarfile.TarInfo]]:
    """Every member of ``tf``, checked against the rules and limits while listing (a bomb is not read to
    its end: the declared total and ratio are checked at each member)."""
    entries: list[tuple[_Entry, tarfile.TarInfo]] = []
    declared = 0
    try:
        for member in tf:  # streamed: a huge member list is cut at max_files
            if len(entries) >= limits.max_files:
                raise ArchiveError(
                    f"archive: more than the limit of {limits.max_files} entries ({_FILES_SETTING})"
                )
            name = _normalise(member.name)
            if member.issym() or member.islnk():
                raise ArchiveError(
                    f"archive entry {member.name!r}: a {'symbolic' if member.issym() else 'hard'} link "
                    "(only files and folders are extracted)"
                )
            if not (member.isfile() or member.isdir()):
                raise ArchiveError(f"archive entry {member.name!r}: not a regular file or folder")
            entries.append((_Entry(name, member.isdir(), member.size), member))
            declared += member.size
            if declared > limits.max_bytes:
                raise ArchiveError(
                    f"archive: more than {limits.max_bytes} bytes uncompressed (limit, {_BYTES_SETTING}), "
                    f"at entry {member.name!r}"
                )
            _check_tar_ratio(declared, compressed, limits.max_ratio, member.name)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"not a readable tar archive ({exc})") from None
    _check_plan([e for e, _ in entries], limits)
    return entries


def _open_tar(data: BinaryIO) -> tarfile.TarFile:
    try:
        return tarfile.open(fileobj=data, mode="r:*")
    except tarfile.TarError as exc:
        raise ArchiveError(f"not a readable tar archive ({exc})") from None


def _extract_tar(data: BinaryIO, dest: Path, limits: ArchiveLimits) -> None:
    compressed = _stream_size(data)
    with _open_tar(data) as tf:
        entries = _tar_entries(tf, compressed, limits)
        budget = [limits.max_bytes]
        for entry, member in entries:
            if entry.is_dir:
                (dest / entry.name).mkdir(parents=True, exist_ok=True)
                continue
            stream = tf.extractfile(member)
            if stream is None:
                raise ArchiveError(f"archive entry {member.name!r}: cannot read")
            with stream:
                _write(dest, entry.name, stream, budget)


def check_archive(
    path: str | Path,
    *,
    limits: ArchiveLimits = DEFAULT_LIMITS,
) -> int:
    """Judge an archive from its listing alone, as :func:`safe_extract` would before writing with the same
    ``limits`` (what a submission check calls): the uncompressed total in bytes, or :class:`ArchiveError`
    naming the entry and the reason."""
    with open(path, "rb") as data:
        if archive_kind(data) == "zip":
            try:
                with zipfile.ZipFile(data) as zf:
                    entries = [e for e, _ in _zip_entries(zf, limits)]
            except zipfile.BadZipFile as exc:
                raise ArchiveError(f"not a readable zip archive ({exc})") from None
        else:
            compressed = _stream_size(data)
            with _open_tar(data) as tf:
                entries = [e for e, _ in _tar_entries(tf, compressed, limits)]
    return sum(e.size for e in entries)


__all__ = ["ArchiveError", "ArchiveLimits", "archive_kind", "check_archive", "safe_extract"]

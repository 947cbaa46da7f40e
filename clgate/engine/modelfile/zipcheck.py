"""Reading a model archive for judging: bounded sizes, one member per name, errors that name the member."""

from __future__ import annotations

import zipfile
from pathlib import Path

from clgate.engine.errors import ModelError

MAX_MEMBERS = 100_000
MAX_MEMBER_BYTES = 1 << 34  # 16 GiB: a weight blob (never read here, only by torch)
MAX_READ_BYTES = 1 << 29  # 512 MiB: a member that is read to be judged (JSON, pickle, code)


def refuse(path: Path, member: str, reason: str) -> ModelError:
    """The one shape of a refusal: the file, the member, the reason."""
    return ModelError(f"{path}: refused: {member}: {reason}")


def open_checked(path: Path) -> zipfile.ZipFile:
    """The archive, after its listing passed: bounded member count and sizes, no duplicate names
    (torch's reader and Python's could pick different copies), no encrypted member."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelError(f"{path}: cannot read the archive ({exc})") from None
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        zf.close()
        raise ModelError(f"{path}: refused: more than {MAX_MEMBERS} members")
    seen: set[str] = set()
    for info in infos:
        problem = None
        if info.filename in seen:
            problem = "appears twice in the archive"
        elif info.flag_bits & 0x1:
            problem = "is encrypted"
        elif info.file_size > MAX_MEMBER_BYTES:
            problem = "is larger than 16 GiB"
        seen.add(info.filename)
        if problem:
            zf.close()
            raise refuse(path, info.filename, problem)
    return zf


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, limit: int = MAX_READ_BYTES) -> bytes:
    """A member's bytes, refusing one that is (or inflates to) more than ``limit`` bytes."""
    if info.file_size > limit:
        raise refuse(path, info.filename, f"is larger than {limit} bytes")
    try:
        with zf.open(info) as f:
            data = f.read(limit + 1)
    except (zipfile.BadZipFile, OSError, RuntimeError, EOFError) as exc:
        raise refuse(path, info.filename, f"cannot be read ({exc})") from None
    if len(data) > limit:
        raise refuse(path, info.filename, f"inflates to more than {limit} bytes")
    return data


def read_head(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, n: int = 4) -> bytes:
    try:
        with zf.open(info) as f:
            return f.read(n)
    except (zipfile.BadZipFile, OSError, RuntimeError, EOFError) as exc:
        raise refuse(path, info.filename, f"cannot be read ({exc})") from None

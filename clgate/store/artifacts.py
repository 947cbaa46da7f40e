"""Content-addressed artifact store: files named by their SHA-256, written once, atomically.

Layout: ``<root>/sha256/<2 hex>/<64 hex>``. Uploads are streamed to a temporary file in the store
(hashing as they go), checked against the size limit, then renamed into place: a half-written upload
is never visible. The root is shared by the API and the workers (a volume in deployment).

>>> import tempfile
>>> store = ArtifactStore(Path(tempfile.mkdtemp()))
>>> stored = store.put_bytes(b"hello")
>>> stored.sha256[:12], stored.size
('2cf24dba5fb0', 5)
>>> store.path(stored.sha256).read_bytes()
b'hello'
>>> parse_ref("sha256:" + stored.sha256) == stored.sha256
True
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

HEX64 = re.compile(r"^[0-9a-f]{64}$")


class ArtifactTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"artifact exceeds the upload limit of {limit} bytes")
        self.limit = limit


class ArtifactNotFound(KeyError):
    pass


class DigestMismatch(ValueError):
    pass


@dataclass(frozen=True)
class Stored:
    sha256: str
    size: int
    created: bool  # False when the same content was already stored


def parse_ref(ref: str) -> str:
    """``sha256:<hex>`` or ``<hex>`` → the 64-hex digest; ``ValueError`` otherwise."""
    digest = ref.removeprefix("sha256:").lower()
    if not HEX64.match(digest):
        raise ValueError(f"{ref!r} is not an artifact reference (expected sha256:<64 hex digits>)")
    return digest


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        digest = parse_ref(sha256)
        return self.root / "sha256" / digest[:2] / digest

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def open_path(self, sha256: str) -> Path:
        path = self.path(sha256)
        if not path.is_file():
            raise ArtifactNotFound(sha256)
        return path

    def sweep_orphans(self, *, older_than_s: float) -> list[str]:
        """Delete temporary upload files untouched for ``older_than_s`` seconds (an upload killed midway
        leaves one; a live upload keeps writing to its file); returns their names."""
        import time

        tmp_dir = self.root / "tmp"
        if not tmp_dir.is_dir():
            return []
        cutoff = time.time() - older_than_s
        removed = []
        for entry in tmp_dir.iterdir():
            try:
                if entry.is_file() and entry.stat().st_mtime < cutoff:
                    entry.unlink()
                    removed.append(entry.name)
            except FileNotFoundError:  # finished or swept by another replica meanwhile
                continue
        return removed

    def _tmp(self) -> tuple[int, str]:
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(dir=tmp_dir, prefix="upload-")

    def _commit(self, tmp_name: str, digest: str, size: int, expected: str | None) -> Stored:
        if expected is not None and parse_ref(expected) != digest:
            os.unlink(tmp_name)
            raise DigestMismatch(f"content has sha256:{digest}, not the expected {expected}")
        final = self.path(digest)
        if final.is_file():
            os.unlink(tmp_name)
            return Stored(digest, size, created=False)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp_name, 0o444)
        os.replace(tmp_name, final)
        return Stored(digest, size, created=True)

    async def put_stream(
        self, chunks: AsyncIterator[bytes], *, max_bytes: int, expected_sha256: str | None = None
    ) -> Stored:
        """Stream ``chunks`` into the store; raises :class:`ArtifactTooLarge` past ``max_bytes``."""
        fd, tmp_name = self._tmp()
        hasher = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise ArtifactTooLarge(max_bytes)
                    hasher.update(chunk)
                    out.write(chunk)
        except BaseException:
            os.unlink(tmp_name)
            raise
        return self._commit(tmp_name, hasher.hexdigest(), size, expected_sha256)

    def put_chunks(self, chunks: Iterable[bytes]) -> Stored:
        fd, tmp_name = self._tmp()
        hasher = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    hasher.update(chunk)
                    out.write(chunk)
        except BaseException:
            os.unlink(tmp_name)
            raise
        return self._commit(tmp_name, hasher.hexdigest(), size, None)

    def put_bytes(self, data: bytes) -> Stored:
        return self.put_chunks([data])

    def put_file(self, path: Path, chunk_size: int = 1 << 20) -> Stored:
        with open(path, "rb") as f:
            return self.put_chunks(iter(lambda: f.read(chunk_size), b""))

"""Content-addressed artifact store: files named by their SHA-256, written once, atomically, verified.

Layout: ``<root>/sha256/<2 hex>/<64 hex>``. Uploads are streamed to a temporary file in the store
(hashing as they go), checked against the size limit, then renamed into place: a half-written upload
is never visible. The root is shared by the API and the workers (a volume in deployment); job processes
never see it (they get copies, :meth:`ArtifactStore.copy_to`).

Integrity: a name is a claim about content, so it is checked whenever content is used. Reading
(:meth:`~ArtifactStore.verified_path`, :meth:`~ArtifactStore.open_path`, :meth:`~ArtifactStore.exists`,
:meth:`~ArtifactStore.copy_to`) hashes the file first; writing content whose name is already taken hashes
the file in place. A file that does not match its name is never served: it is moved to
``<root>/quarantine/`` and reported to ``on_corrupt`` (the record store audits it), and the caller gets
:class:`ArtifactCorrupt`.

>>> import tempfile
>>> store = ArtifactStore(Path(tempfile.mkdtemp()))
>>> stored = store.put_bytes(b"hello")
>>> stored.sha256[:12], stored.size
('2cf24dba5fb0', 5)
>>> store.path(stored.sha256).read_bytes()
b'hello'
>>> parse_ref("sha256:" + stored.sha256) == stored.sha256
True
>>> _ = store.path(stored.sha256).chmod(0o644); _ = store.path(stored.sha256).write_bytes(b"jello")
>>> store.exists(stored.sha256)   # tampered with on disk: quarantined, no longer served
False
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger("clgate.store")
CHUNK = 1 << 20

HEX64 = re.compile(r"^[0-9a-f]{64}$")


class ArtifactTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"artifact exceeds the upload limit of {limit} bytes")
        self.limit = limit


def _private_mkdir(path: Path) -> None:
    """``path`` and each missing folder above it created 0700 (``mkdir(parents=True)`` would give the
    parents the default mode)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)


class ArtifactNotFound(KeyError):
    pass


class DigestMismatch(ValueError):
    pass


@dataclass(frozen=True)
class Corruption:
    """A stored file whose content does not match its name, as moved aside."""

    expected: str  # the digest the file is named by
    actual: str  # the digest of what it holds
    quarantined_as: str  # its path relative to the store root, under quarantine/


class ArtifactCorrupt(ArtifactNotFound):
    """The stored file does not match its hash: it was quarantined and is not served."""

    def __init__(self, corruption: Corruption) -> None:
        super().__init__(corruption.expected)
        self.corruption = corruption

    def __str__(self) -> str:
        return (
            f"stored artifact sha256:{self.corruption.expected} does not match its content "
            f"(sha256:{self.corruption.actual}); quarantined, not served"
        )


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


def hash_file(path: Path) -> str:
    """SHA-256 of a file's content (read in chunks)."""
    hasher = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


@dataclass
class _Sink:
    """Bytes on their way into a temporary file: hashed and counted, refused past ``max_bytes``."""

    out: BinaryIO
    tmp_name: str
    max_bytes: int | None = None
    size: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.max_bytes is not None and self.size > self.max_bytes:
            raise ArtifactTooLarge(self.max_bytes)
        self.hasher.update(chunk)
        self.out.write(chunk)


class ArtifactStore:
    def __init__(self, root: Path, *, on_corrupt: Callable[[Corruption], None] | None = None) -> None:
        self.root = Path(root)
        self.on_corrupt = on_corrupt

    def path(self, sha256: str) -> Path:
        """Where the content named ``sha256`` lives (a location only: nothing is checked)."""
        digest = parse_ref(sha256)
        return self.root / "sha256" / digest[:2] / digest

    def exists(self, sha256: str) -> bool:
        """Whether content matching ``sha256`` is stored (a mismatching file is quarantined: ``False``)."""
        try:
            self.verified_path(sha256)
        except ArtifactNotFound:
            return False
        return True

    def verified_path(self, sha256: str) -> Path:
        """The file of ``sha256`` after hashing it; :class:`ArtifactNotFound` or :class:`ArtifactCorrupt`."""
        digest = parse_ref(sha256)
        path = self._present(digest)
        actual = hash_file(path)
        if actual != digest:
            raise ArtifactCorrupt(self._quarantine(path, digest, actual))
        return path

    def open_path(self, sha256: str) -> Path:
        """The verified file of ``sha256`` (for trusted readers in this process; jobs get copies)."""
        return self.verified_path(sha256)

    def copy_to(self, sha256: str, dest: Path) -> Path:
        """Copy the content of ``sha256`` to ``dest`` (a new file), verifying the bytes that were copied.

        Hashing the copy rather than the original leaves no window in which the original could change
        between the check and the read. On a mismatch ``dest`` is removed and the original quarantined.
        """
        digest = parse_ref(sha256)
        source = self._present(digest)
        hasher = hashlib.sha256()
        with open(source, "rb") as f, open(dest, "xb") as out:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                hasher.update(chunk)
                out.write(chunk)
        actual = hasher.hexdigest()
        if actual != digest:
            dest.unlink()
            raise ArtifactCorrupt(self._quarantine(source, digest, actual))
        return dest

    def _present(self, digest: str) -> Path:
        path = self.path(digest)
        if path.is_symlink():  # the store writes regular files only
            raise ArtifactCorrupt(self._quarantine(path, digest, "symlink"))
        if not path.is_file():
            raise ArtifactNotFound(digest)
        return path

    def _quarantine(self, path: Path, expected: str, actual: str) -> Corruption:
        folder = self.root / "quarantine"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{expected}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
        try:
            os.replace(path, target)
        except FileNotFoundError:  # another reader moved it first
            pass
        except OSError:  # cannot move it (read-only volume …): at least never serve it
            log.exception("could not quarantine %s", path)
        corruption = Corruption(expected, actual, str(target.relative_to(self.root)))
        log.error(
            "artifact sha256:%s holds content sha256:%s: quarantined as %s",
            expected,
            actual,
            corruption.quarantined_as,
        )
        if self.on_corrupt is not None:
            try:
                self.on_corrupt(corruption)
            except Exception:  # the refusal stands even when the audit write fails
                log.exception("could not record the quarantine of sha256:%s", expected)
        return corruption

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
        _private_mkdir(tmp_dir)
        return tempfile.mkstemp(dir=tmp_dir, prefix="upload-")

    def _commit(self, tmp_name: str, digest: str, size: int, expected: str | None) -> Stored:
        if expected is not None and parse_ref(expected) != digest:
            os.unlink(tmp_name)
            raise DigestMismatch(f"content has sha256:{digest}, not the expected {expected}")
        final = self.path(digest)
        if final.is_file() and not final.is_symlink():
            actual = hash_file(final)
            if actual == digest:
                os.unlink(tmp_name)
                return Stored(digest, size, created=False)
            # something else sits under this name (planted or rotted): move it aside, store the real content
            self._quarantine(final, digest, actual)
        elif final.is_symlink():
            self._quarantine(final, digest, "symlink")
        _private_mkdir(final.parent)
        os.chmod(tmp_name, 0o400)  # read-only, and only for the service's user
        os.replace(tmp_name, final)
        return Stored(digest, size, created=True)

    @contextlib.contextmanager
    def _writing(self, *, max_bytes: int | None = None) -> Iterator[_Sink]:
        """A temporary file that hashes and counts what is written; removed if writing fails."""
        fd, tmp_name = self._tmp()
        try:
            with os.fdopen(fd, "wb") as out:
                yield _Sink(out, tmp_name, max_bytes)
        except BaseException:
            os.unlink(tmp_name)
            raise

    async def put_stream(
        self, chunks: AsyncIterator[bytes], *, max_bytes: int, expected_sha256: str | None = None
    ) -> Stored:
        """Stream ``chunks`` into the store; raises :class:`ArtifactTooLarge` past ``max_bytes``."""
        with self._writing(max_bytes=max_bytes) as sink:
            async for chunk in chunks:
                sink.write(chunk)
        return self._commit(sink.tmp_name, sink.hasher.hexdigest(), sink.size, expected_sha256)

    def put_chunks(self, chunks: Iterable[bytes]) -> Stored:
        with self._writing() as sink:
            for chunk in chunks:
                sink.write(chunk)
        return self._commit(sink.tmp_name, sink.hasher.hexdigest(), sink.size, None)

    def put_bytes(self, data: bytes) -> Stored:
        return self.put_chunks([data])

    def put_file(self, path: Path, chunk_size: int = CHUNK) -> Stored:
        with open(path, "rb") as f:
            return self.put_chunks(iter(lambda: f.read(chunk_size), b""))

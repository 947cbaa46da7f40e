"""Safe extraction of image-folder archives: good ones load, hostile entries are refused before writing."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile

import numpy as np
import pytest

from clgate.engine.archive import FOLDER_ENTRIES, ArchiveError, ArchiveLimits, safe_extract
from clgate.engine.data import load_image_folder


def _png(value: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), value, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


FILES = {
    f"data/{split}/{cls}/{i}.png": _png(40 * c + i)
    for split in ("train", "test")
    for c, cls in enumerate(("cat", "dog"))
    for i in range(2)
}


def _tar(entries: dict[str, bytes], mode: str = "w:gz", extra=None) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if extra is not None:
            tf.addfile(extra)
    buf.seek(0)
    return buf


def _zip(entries: dict[str, bytes], extra: zipfile.ZipInfo | None = None) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        if extra is not None:
            zf.writestr(extra, b"/etc/passwd")
    buf.seek(0)
    return buf


@pytest.mark.parametrize("make", [_tar, _zip], ids=["tar.gz", "zip"])
def test_good_archive_extracts_and_loads(tmp_path, make):
    root = safe_extract(make(FILES), tmp_path / "out")
    assert root == tmp_path / "out" / "data"
    ds = load_image_folder(root, size=(4, 4))
    assert ds.class_names == ["cat", "dog"] and len(ds.y_train) == 4


def _link(kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo("data/train/cat/link.png")
    info.type = kind
    info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (lambda: _tar({"../evil.png": b"x"}), "'..' in the path"),
        (lambda: _tar({"data/../../evil.png": b"x"}), "'..' in the path"),
        (lambda: _tar({"/etc/cron.d/evil": b"x"}), "absolute path"),
        (lambda: _zip({"C:\\evil.png": b"x"}), "absolute path"),
        (lambda: _zip({"data/../evil.png": b"x"}), "'..' in the path"),
        (lambda: _tar(FILES, extra=_link(tarfile.SYMTYPE)), "a symbolic link"),
        (lambda: _tar(FILES, extra=_link(tarfile.LNKTYPE)), "a hard link"),
        (lambda: _tar(FILES, extra=_fifo()), "not a regular file"),
        (lambda: _zip(FILES, extra=_zip_symlink()), "a symbolic link"),
        (lambda: _zip({"a.png": b"x", "A.PNG": b"y"}), "appears more than once"),
        (lambda: _zip({"bomb.bin": bytes(5_000_000)}), "compression ratio"),
        (lambda: io.BytesIO(b"not an archive at all"), "not a zip or tar archive"),
    ],
)
def test_hostile_entries_are_refused_and_nothing_is_left(tmp_path, archive, message):
    with pytest.raises(ArchiveError, match=message.replace("(", r"\(")):
        safe_extract(archive(), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "evil.png").exists()


def _fifo() -> tarfile.TarInfo:
    info = tarfile.TarInfo("data/train/cat/pipe")
    info.type = tarfile.FIFOTYPE
    return info


def _zip_symlink() -> zipfile.ZipInfo:
    info = zipfile.ZipInfo("data/train/cat/link.png")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def test_count_and_size_limits(tmp_path):
    with pytest.raises(ArchiveError, match=r"more than the limit of 3 entries \(CLGATE_MAX_SAMPLES \+"):
        safe_extract(_tar(FILES), tmp_path / "a", limits=ArchiveLimits(max_files=3))
    with pytest.raises(ArchiveError, match=r"uncompressed, more than the limit of 100 \(CLGATE_MAX_NPZ"):
        safe_extract(_zip(FILES), tmp_path / "b", limits=ArchiveLimits(max_bytes=100))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "keep").write_text("x")
    with pytest.raises(ArchiveError, match="not an empty folder"):
        safe_extract(_zip(FILES), tmp_path / "c")
    assert (tmp_path / "c" / "keep").exists()


def _tar_gz_bomb(declared: int, chunks: int) -> bytes:
    """A ``.tar.gz`` of one member declaring ``declared`` bytes of zeros, made of gzip members (a few MB
    compressed, never the expanded bytes in memory)."""
    import gzip

    header = tarfile.TarInfo("images/zeros.bin")
    header.size = declared
    zeros = gzip.compress(b"\0" * (1 << 20), 9)
    return gzip.compress(header.tobuf(format=tarfile.GNU_FORMAT)) + zeros * chunks


def test_a_tar_gz_bomb_is_refused_from_its_listing_without_filling_the_disk(tmp_path):
    bomb = _tar_gz_bomb(7 << 30, 3000)  # 7 GiB declared, ~3 MB compressed
    assert len(bomb) < 8 << 20
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(bomb)
    with pytest.raises(ArchiveError, match=r"limit|ratio"):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_tar_gz_over_the_ratio_is_refused_even_under_the_byte_limit(tmp_path):
    archive = tmp_path / "ratio.tar.gz"
    archive.write_bytes(_tar_gz_bomb(64 << 20, 64))  # 64 MiB of zeros in ~70 KB
    with pytest.raises(ArchiveError, match=r"ratio above 200:1"):
        safe_extract(archive, tmp_path / "out", limits=ArchiveLimits(max_bytes=1 << 30))
    assert not (tmp_path / "out").exists()
    # the same bytes within an explicit ratio are extracted, bounded by the byte limit
    with pytest.raises(ArchiveError, match=r"more than 1048576 bytes uncompressed"):
        safe_extract(archive, tmp_path / "out2", limits=ArchiveLimits(max_bytes=1 << 20, max_ratio=10_000))
    assert not (tmp_path / "out2").exists()


def test_check_archive_judges_from_the_listing_alone(tmp_path):
    from clgate.engine.archive import check_archive

    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(_tar_gz_bomb(7 << 30, 300))
    with pytest.raises(ArchiveError, match=r"limit|ratio"):
        check_archive(archive)
    ok = tmp_path / "ok.tar"
    with tarfile.open(ok, "w") as tf:
        info = tarfile.TarInfo("train/a/x.txt")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"abc"))
    assert check_archive(ok) == 3
    assert list(tmp_path.iterdir()) == [archive, ok] or set(tmp_path.iterdir()) == {archive, ok}


def test_the_limits_follow_the_data_settings(tmp_path):
    """One source for both sides: the bytes are CLGATE_MAX_NPZ_BYTES, the entries CLGATE_MAX_SAMPLES images
    plus the folders; the defaults are those settings' defaults."""
    from clgate.engine.data import MAX_DATA_BYTES, MAX_SAMPLES
    from clgate.store.settings import Settings

    limits = ArchiveLimits.following(max_bytes=1234, max_samples=7)
    assert (limits.max_bytes, limits.max_files) == (1234, 7 + FOLDER_ENTRIES)
    defaults = Settings(data_dir=tmp_path)
    assert ArchiveLimits() == ArchiveLimits.following(
        max_bytes=defaults.max_npz_bytes, max_samples=defaults.max_samples
    )
    assert (defaults.max_npz_bytes, defaults.max_samples) == (MAX_DATA_BYTES, MAX_SAMPLES)

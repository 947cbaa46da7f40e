"""``clgate audit new-key FILE``: the signing key a deployment mounts as a secret file (deploy/), made
before any store exists; its public key is what verifiers are given."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from clgate.store import open_store
from clgate.store.settings import Settings
from tests.fixtures.cli import run_clgate


def _clgate(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_clgate(*args, cwd=cwd, env=env, timeout=60)


def test_new_key_makes_the_file_the_service_signs_with(tmp_path):
    key = tmp_path / "secrets" / "signing.key"
    made = _clgate("audit", "new-key", str(key), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = made.stdout.strip()
    assert public.startswith("ed25519:")
    assert not (tmp_path / "clgate-data").exists()  # no store needed, none made
    shown = _clgate("audit", "public-key", cwd=tmp_path, CLGATE_SIGNING_KEY_FILE=str(key))
    assert shown.returncode == 0 and shown.stdout.strip() == public, shown.stderr
    store = open_store(Settings(data_dir=tmp_path / "data", signing_key_file=key))
    try:
        assert store.signer is not None and store.signer.public_text == public
        assert not (tmp_path / "data" / "signing.key").exists()  # the given file, not a key of its own
    finally:
        store.close()


def test_new_key_never_overwrites_a_key(tmp_path):
    key = tmp_path / "signing.key"
    assert _clgate("audit", "new-key", str(key), cwd=tmp_path).returncode == 0
    before = key.read_bytes()
    again = _clgate("audit", "new-key", str(key), cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr == f"error: {key}: exists already; a signing key is never overwritten\n"
    assert key.read_bytes() == before

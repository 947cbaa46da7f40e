"""The artifact store serves only content that matches its hash: checked on read and on write; a file that
does not match is refused, moved to quarantine/ and audited (real files, a real SQLite record store)."""

from __future__ import annotations

import hashlib
import os

import pytest
from sqlalchemy import select

from clgate.store import open_store
from clgate.store.artifacts import ArtifactCorrupt, ArtifactNotFound, ArtifactStore
from clgate.store.models import AuditEvent
from clgate.store.settings import Settings


@pytest.fixture
def store(tmp_path):
    s = open_store(Settings(data_dir=tmp_path / "data"), migrate=True)
    yield s
    s.close()


def _tamper(path, data: bytes) -> None:
    os.chmod(path, 0o644)
    path.write_bytes(data)


def _events(store, action: str) -> list[AuditEvent]:
    with store.sessions() as s:
        return list(s.scalars(select(AuditEvent).where(AuditEvent.action == action)))


def test_a_corrupted_file_is_refused_quarantined_and_audited(store, tmp_path):
    stored = store.artifacts.put_bytes(b"the real model")
    path = store.artifacts.path(stored.sha256)
    _tamper(path, b"the admin key")
    with pytest.raises(ArtifactCorrupt, match="does not match"):
        store.artifacts.open_path(stored.sha256)
    assert not path.exists()
    quarantined = list((store.settings.artifact_dir / "quarantine").iterdir())
    assert [q.read_bytes() for q in quarantined] == [b"the admin key"]
    (event,) = _events(store, "artifact.quarantined")
    assert event.subject_id == stored.sha256
    assert event.details["actual_sha256"] == hashlib.sha256(b"the admin key").hexdigest()
    assert event.details["quarantined_as"].startswith("quarantine/")
    # gone for every reader, and staging refuses it too
    assert not store.artifacts.exists(stored.sha256)
    with pytest.raises(ArtifactNotFound):
        store.artifacts.copy_to(stored.sha256, tmp_path / "copy")
    # uploading the true content again restores it
    assert store.artifacts.put_bytes(b"the real model").created
    assert store.artifacts.open_path(stored.sha256).read_bytes() == b"the real model"


def test_staging_copies_verify_the_bytes_copied(store, tmp_path):
    stored = store.artifacts.put_bytes(b"data")
    assert store.artifacts.copy_to(stored.sha256, tmp_path / "ok").read_bytes() == b"data"
    _tamper(store.artifacts.path(stored.sha256), b"evil")
    with pytest.raises(ArtifactCorrupt):
        store.artifacts.copy_to(stored.sha256, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_a_file_planted_under_a_forged_name_is_replaced_when_the_real_content_arrives(store):
    """The attack of issue 10: a key written under the hash of what the attacker uploads next."""
    upload = b"what the attacker uploads next"
    digest = hashlib.sha256(upload).hexdigest()
    forged = store.artifacts.path(digest)
    forged.parent.mkdir(parents=True)
    forged.write_bytes(b"the admin key")
    stored = store.artifacts.put_bytes(upload)
    assert stored.sha256 == digest
    assert store.artifacts.open_path(digest).read_bytes() == upload
    assert len(_events(store, "artifact.quarantined")) == 1


def test_a_symlink_in_the_store_is_never_followed(store, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"s")
    digest = hashlib.sha256(b"s").hexdigest()
    link = store.artifacts.path(digest)
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    with pytest.raises(ArtifactCorrupt):
        store.artifacts.open_path(digest)
    assert not link.exists() and not link.is_symlink() and secret.read_bytes() == b"s"


def test_the_api_does_not_serve_a_corrupted_artifact(api):
    viewer, submitter = api.as_role("viewer"), api.as_role("submitter")
    r = api.post("/v1/artifacts", content=b"honest bytes", headers=submitter)
    assert r.status_code == 201, r.text
    digest = r.json()["sha256"]
    assert api.get(f"/v1/artifacts/{digest}/content", headers=viewer).content == b"honest bytes"
    _tamper(ArtifactStore(api.settings.artifact_dir).path(digest), b"something else")
    r = api.get(f"/v1/artifacts/{digest}/content", headers=viewer)
    assert r.status_code == 404 and b"something else" not in r.content
    events = api.get("/v1/audit", params={"action": "artifact.quarantined"}, headers=api.as_role("admin"))
    assert events.status_code == 200
    assert [(e["action"], e["subject_id"]) for e in events.json()["data"]] == [
        ("artifact.quarantined", digest)
    ]

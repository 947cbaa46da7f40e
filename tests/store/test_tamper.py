"""A writer without the signing key — raw SQL on the SQLite file, or the table owner on PostgreSQL with
the append-only triggers switched off — inserts, edits, deletes, reorders, revives or truncates and
rebuilds each kind of record; the signed history names the bad record every time. Honest histories
(empty families that grow included) verify; rollback is caught with a head taken later; a rotated key
verifies old and new records. One seeded store per database, copied for each attack."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text

from clgate.store import history, open_store
from clgate.store.db import audit, make_sessionmaker, session_scope
from clgate.store.models import ApiKey, Base, Baseline, Decision, Job, Policy, Waiver
from clgate.store.settings import Settings
from clgate.store.signing import Signer, load_signer, write_new_key

pytestmark = pytest.mark.timeout(300)

KINDS = ("decisions", "waivers", "audit_events", "baselines", "policies", "jobs", "api_keys")
ATTACKS = ("insert", "update", "delete", "reorder", "revive", "truncate-rebuild")
REVIVABLE = {"api_keys", "jobs", "baselines"}  # records whose state changes: an older state brought back
PK = {
    "decisions": "id",
    "waivers": "id",
    "audit_events": "seq",
    "baselines": "model_name",
    "policies": "id",
    "jobs": "id",
    "api_keys": "id",
}
TARGET = {  # the record each attack aims at
    "decisions": "d1",
    "waivers": "w1",
    "audit_events": "2",
    "baselines": "m",
    "policies": "p1",
    "jobs": "j1",
    "api_keys": "kviewer",
}
EDIT = {  # what the writer changes
    "decisions": {"verdict": "PASS"},
    "waivers": {"approver": "mallory"},
    "audit_events": {"actor": "mallory"},
    "baselines": {"job_id": "j1"},
    "policies": {"document": json.dumps({"rules": []})},
    "jobs": {"state": "succeeded"},
    "api_keys": {"role": "admin"},
}
REVIVE = {
    "api_keys": ("krevoked", {"revoked_at": None}),
    "jobs": ("j1", {"state": "running", "finished_at": None}),
    "baselines": ("m", {"job_id": "j2"}),  # the baseline it had before (a state that was signed once)
}


def _seed(settings: Settings) -> None:
    store = open_store(settings, migrate=True)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with session_scope(store.sessions) as s:
        for kid, role in (("kviewer", "viewer"), ("krevoked", "approver")):
            s.add(ApiKey(id=kid, name=kid, role=role, secret_sha256="0" * 64, created_at=t0))
        for pid in ("p1", "p2"):
            s.add(
                Policy(id=pid, name="gate", version=pid, document={"rules": [{"kind": "x"}]}, sha256="0" * 64)
            )
        s.flush()
        for jid in ("j1", "j2", "j3", "j4"):
            s.add(Job(id=jid, mode="metrics", queue="cpu", model_name="m", policy_id="p1", progress={}))
    with session_scope(store.sessions) as s:  # finishing is a change of state: a new signed entry
        for jid, state in (("j1", "failed"), ("j2", "succeeded"), ("j3", "succeeded")):
            job = s.get(Job, jid)
            job.state, job.finished_at = state, t0 + dt.timedelta(hours=1)
            audit(s, "worker", f"job.{state}", "job", jid)
        s.get(ApiKey, "krevoked").revoked_at = t0 + dt.timedelta(hours=2)
    with session_scope(store.sessions) as s:
        for did, jid, verdict in (("d1", "j1", "FAIL"), ("d2", "j2", "PASS")):
            s.add(
                Decision(
                    id=did,
                    job_id=jid,
                    policy_id="p1",
                    model_name="m",
                    verdict=verdict,
                    headline={"mica": 0.5},
                    document={"verdict": verdict},
                )
            )
        s.flush()
        for wid in ("w1", "w2"):
            s.add(Waiver(id=wid, decision_id="d1", job_id="j1", justification="reviewed", approver="key:a"))
        s.add(Baseline(model_name="m", job_id="j2", set_by="key:a"))
        s.add(Baseline(model_name="m2", job_id="j2", set_by="key:a"))
    with session_scope(store.sessions) as s:
        s.get(Baseline, "m").job_id = "j3"
        audit(s, "key:a", "baseline.set", "model", "m")
    store.close()


def _problems(url: str, signer_public) -> dict[str, history.Problem]:
    engine = create_engine(url)
    try:
        with make_sessionmaker(engine)() as s:
            reports = history.verify(s, history.trusted_keys([signer_public]))
    finally:
        engine.dispose()
    return {r.family: r.problem for r in reports if r.problem is not None}


def _row(conn, table: str, pk: str, target: str) -> dict:
    t = Base.metadata.tables[table]
    key = int(target) if pk == "seq" else target
    return dict(conn.execute(select(t).where(t.c[pk] == key)).mappings().one())


def _forged_copy(conn, kind: str) -> tuple[dict, str]:
    """A new row of ``kind`` made from the target's (what an INSERT by a writer looks like)."""
    table, pk = kind, PK[kind]
    row = _row(conn, table, pk, TARGET[kind])
    t = Base.metadata.tables[table]
    if "seq" in row:
        row["seq"] = conn.execute(select(func.max(t.c.seq))).scalar() + 1
    row.pop("id", None) if kind == "audit_events" else None
    new = str(row["seq"]) if pk == "seq" else "forged"
    if pk != "seq":
        row[pk] = new
    if kind == "decisions":
        row.update(job_id="j4", verdict="PASS")  # a PASS for a job that has none
    elif kind == "policies":
        row["version"] = "forged"
    elif kind == "jobs":
        row.update(state="succeeded", idempotency_key=None)
    return row, new


def _attack(conn, kind: str, attack: str) -> str | None:
    """Do ``attack`` on ``kind``; the subject verify should name (None: any record of the family)."""
    table, pk, target = kind, PK[kind], TARGET[kind]
    t = Base.metadata.tables[table]
    where = t.c[pk] == (int(target) if pk == "seq" else target)
    if attack == "insert":
        row, new = _forged_copy(conn, kind)
        conn.execute(t.insert().values(**row))
        return new
    if attack == "update":
        conn.execute(t.update().where(where).values(**EDIT[kind]))
        return target
    if attack == "delete":
        conn.execute(t.delete().where(where))
        return target
    if attack == "revive":
        subject, values = REVIVE[kind]
        conn.execute(t.update().where(t.c[pk] == subject).values(**values))
        return subject
    h = Base.metadata.tables["history"]
    if attack == "reorder":
        first = (h.c.family == kind) & (h.c.seq == 1)
        conn.execute(h.update().where(first).values(seq=-1))
        conn.execute(h.update().where((h.c.family == kind) & (h.c.seq == 2)).values(seq=1))
        conn.execute(h.update().where((h.c.family == kind) & (h.c.seq == -1)).values(seq=2))
        return None
    # truncate and rebuild: every row and entry of the family gone, the rows written back, one edited
    rows = [dict(r) for r in conn.execute(select(t)).mappings()]
    conn.execute(h.delete().where(h.c.family == kind))
    conn.execute(
        text("UPDATE chain_heads SET seq = 0, record_hash = :g WHERE chain = :c"),
        {"g": "0" * 64, "c": "h:" + kind},
    )
    conn.execute(t.delete())
    for row in rows:
        if str(row[pk]) == target:
            row.update(EDIT[kind])
        conn.execute(t.insert().values(**row))
    return None


def _tampered(url: str, dialect: str, kind: str, attack: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            if dialect == "sqlite":
                for (name,) in conn.execute(
                    text("SELECT name FROM sqlite_master WHERE type = 'trigger'")
                ).all():
                    conn.execute(text(f"DROP TRIGGER {name}"))
            else:  # the table owner with its triggers (and the foreign keys' ones) off, no signing key
                conn.execute(text("SET session_replication_role = replica"))
            return _attack(conn, kind, attack)
    finally:
        engine.dispose()


CASES = [(k, a) for k in KINDS for a in ATTACKS if a != "revive" or k in REVIVABLE]


def _sqlite_copies(settings: Settings, tmp_path: Path):
    source = settings.data_dir / "clgate.db"

    def copy(name: str) -> str:
        target = tmp_path / f"{name}.db"
        shutil.copyfile(source, target)
        return f"sqlite:///{target}"

    return copy


def _postgres_copies(url: str):
    """The seeded store is database ``postgres``; each copy is a database made from it as a template."""
    base = url.rsplit("/", 1)[0]
    admin = create_engine(f"{base}/template1", isolation_level="AUTOCOMMIT")

    def copy(name: str) -> str:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE postgres'))
        return f"{base}/{name}"

    return copy


def _check_every_attack_is_named(settings: Settings, dialect: str, copy) -> None:
    _seed(settings)
    public = load_signer(settings.signing_key_path()).public
    assert _problems(copy("honest"), public) == {}
    missed = []
    for kind, attack in CASES:
        url = copy(f"c_{kind}_{attack}".replace("-", "_"))
        subject = _tampered(url, dialect, kind, attack)
        problem = _problems(url, public).get(kind)
        if problem is None:
            missed.append(f"{kind}/{attack}: not detected")
        elif subject is not None and problem.subject != subject:
            missed.append(f"{kind}/{attack}: named {problem}, not record {subject}")
    assert missed == [], "\n".join(missed)


def test_every_attack_is_named_on_sqlite(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    _check_every_attack_is_named(settings, "sqlite", _sqlite_copies(settings, tmp_path))


@pytest.mark.integration
def test_every_attack_is_named_on_postgresql(tmp_path, postgres_url):
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_url)
    _check_every_attack_is_named(settings, "postgresql", _postgres_copies(postgres_url))


def _clgate(settings: Settings, *argv: str, key_file: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env["CLGATE_DATA_DIR"] = str(settings.data_dir)
    if settings.database_url:
        env["CLGATE_DATABASE_URL"] = settings.database_url
    if key_file is not None:
        env["CLGATE_SIGNING_KEY_FILE"] = str(key_file)
    return subprocess.run(
        [sys.executable, "-m", "clgate", *argv],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _add_event(settings: Settings, action: str, key_file: Path | None = None) -> None:
    settings = settings.model_copy(update={"signing_key_file": key_file}) if key_file else settings
    store = open_store(settings)
    with session_scope(store.sessions) as s:
        audit(s, "key:a", action, "thing", action)
    store.close()


def test_heads_of_empty_families_stay_valid_as_they_grow(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    open_store(settings, migrate=True).close()
    heads = tmp_path / "heads.json"
    taken = _clgate(settings, "audit", "heads")
    assert taken.returncode == 0, taken.stderr
    heads.write_text(taken.stdout)
    assert {h["family"]: h["length"] for h in json.loads(taken.stdout)["heads"]}["waivers"] == 0
    _seed(settings)
    grown = _clgate(settings, "audit", "verify", "--anchor", "waivers:0:" + "0" * 64, "--head", str(heads))
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert "ok history waivers: 2 entries" in grown.stdout
    forged = _clgate(settings, "audit", "verify", "--anchor", "waivers:0:" + "f" * 64)
    assert forged.returncode == 1


def test_rollback_and_fork_are_caught_with_a_head_taken_later(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    _seed(settings)
    db = settings.data_dir / "clgate.db"
    snapshot = tmp_path / "snapshot.db"
    shutil.copyfile(db, snapshot)
    _add_event(settings, "key.revoked")
    heads = tmp_path / "heads.json"
    heads.write_text(_clgate(settings, "audit", "heads").stdout)
    shutil.copyfile(snapshot, db)  # the whole database rolled back: every record in it is signed
    for leftover in ("clgate.db-wal", "clgate.db-shm"):
        (settings.data_dir / leftover).unlink(missing_ok=True)
    assert _clgate(settings, "audit", "verify").returncode == 0  # consistent on its own …
    rolled = _clgate(settings, "audit", "verify", "--head", str(heads))
    assert rolled.returncode == 1, rolled.stdout  # … but shorter than a head taken before
    assert "BROKEN head" in rolled.stdout and "audit_events" in rolled.stdout and "shorter" in rolled.stdout
    _add_event(settings, "something.else")  # a fork: as long as the head, another record at its end
    forked = _clgate(settings, "audit", "verify", "--head", str(heads))
    assert forked.returncode == 1 and "differs from the head" in forked.stdout, forked.stdout
    document = json.loads(heads.read_text())
    document["heads"][0]["length"] += 1  # a head edited by hand no longer carries a valid signature
    heads.write_text(json.dumps(document))
    edited = _clgate(settings, "audit", "verify", "--head", str(heads))
    assert edited.returncode == 1 and "bad signature" in edited.stdout
    assert _clgate(settings, "audit", "verify", "--head", str(tmp_path / "none.json")).returncode == 2


def test_rotation_keeps_old_records_valid_and_trusts_only_what_a_trusted_key_signed(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    _seed(settings)
    old_pub = tmp_path / "old.pub"
    old_pub.write_text(_clgate(settings, "audit", "public-key").stdout)
    new_key = tmp_path / "secrets" / "new.key"
    rotated = _clgate(settings, "audit", "rotate-key", str(new_key))
    assert rotated.returncode == 0, rotated.stderr
    assert new_key.stat().st_mode & 0o777 == 0o600
    _add_event(settings, "after.rotation", key_file=new_key)
    new_pub = tmp_path / "new.pub"
    new_pub.write_text(_clgate(settings, "audit", "public-key", key_file=new_key).stdout)
    assert new_pub.read_text() != old_pub.read_text()
    engine = create_engine(settings.resolved_database_url())
    with engine.connect() as conn:
        signers = conn.execute(
            text("SELECT DISTINCT key_id FROM history WHERE family = 'audit_events'")
        ).all()
    engine.dispose()
    assert len(signers) == 2  # records before the rotation under the old key, after it under the new
    ok = _clgate(settings, "audit", "verify", "--key", str(old_pub))
    assert ok.returncode == 0, ok.stdout  # the new key is trusted because the old one introduced it
    both = _clgate(settings, "audit", "verify", "--key", str(old_pub), "--key", str(new_pub))
    assert both.returncode == 0, both.stdout
    only_new = _clgate(settings, "audit", "verify", "--key", str(new_pub))
    assert only_new.returncode == 1 and "not trusted" in only_new.stdout
    bad = tmp_path / "bad.pub"
    bad.write_text("ed25519:nonsense")
    refused = _clgate(settings, "audit", "verify", "--key", str(bad))
    assert refused.returncode == 2 and "--key" in refused.stderr


def test_a_key_of_the_writers_own_is_not_trusted(tmp_path):
    """A writer with the database and a key of its own signs a forged record: the key is not trusted."""
    settings = Settings(data_dir=tmp_path / "data")
    _seed(settings)
    mallory = tmp_path / "mallory.key"
    write_new_key(mallory)
    _add_event(settings, "job.waived", key_file=mallory)
    result = _clgate(settings, "audit", "verify")
    assert result.returncode == 1
    assert "BROKEN history signing_keys: seq" in result.stdout and "not trusted" in result.stdout, (
        result.stdout
    )
    assert "BROKEN history audit_events: seq" in result.stdout, result.stdout
    assert isinstance(load_signer(mallory), Signer)


def test_the_api_exports_signed_heads_and_the_gauges_count_entries(
    api, tmp_path, example_log, gate_example_log
):
    """``GET /v1/audit/heads`` gives heads `audit verify --head` accepts; /metrics counts entries (both to a
    global_admin key: tests/service/test_audit_heads.py has a project's key refused)."""
    r = api.get("/v1/audit/heads", headers=api.as_role("admin"))
    assert r.status_code == 200, r.text
    body = r.json()
    lengths = {h["family"]: h["length"] for h in body["heads"]}
    assert lengths["api_keys"] >= 4 and set(lengths) == set(history.FAMILIES)
    assert api.get("/v1/audit/heads").status_code == 401
    heads = tmp_path / "api-heads.json"
    heads.write_text(r.text)
    public = tmp_path / "api.pub"
    public.write_text(body["public_key"])
    settings = api.settings
    ok = _clgate(settings, "audit", "verify", "--head", str(heads), "--key", str(public))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    metrics = api.get("/metrics", headers=api.as_role("admin")).text
    assert f'clgate_history_entries{{family="api_keys"}} {float(lengths["api_keys"])}' in metrics, metrics
    # every decision.json carries the heads signed when it was gated (its provenance, printed in report.html)
    job = gate_example_log(api, api.as_role("admin"), example_log)
    decision = api.get(f"/v1/jobs/{job['id']}/results/decision.json", headers=api.as_role("viewer"))
    heads = decision.json()["provenance"]["history_heads"]
    assert {h["family"] for h in heads} == set(history.FAMILIES)
    saved = tmp_path / "decision.json"
    saved.write_bytes(decision.content)
    checked = _clgate(settings, "audit", "verify", "--head", str(saved), "--key", str(public))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (
        "history_heads"
        in api.get(f"/v1/jobs/{job['id']}/results/report.html", headers=api.as_role("viewer")).text
    )


def test_an_upgraded_store_is_sealed_by_the_first_process_with_the_key(tmp_path):
    from clgate.store.db import upgrade

    settings = Settings(data_dir=tmp_path / "data")
    url = settings.resolved_database_url()
    upgrade(url, "0004w")  # a store from before the signed history, with a key in it
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO api_keys (id, name, role, project, secret_sha256, created_at) "
                "VALUES ('old', 'old', 'viewer', 'default', :h, '2026-01-01 00:00:00')"
            ),
            {"h": "0" * 64},
        )
    upgraded = _clgate(settings, "db", "upgrade")  # the migration holds no key and signs nothing
    assert upgraded.returncode == 0 and not settings.signing_key_path().exists(), upgraded.stderr
    open_store(settings, migrate=True).close()  # the API's start with the key seals what is there
    with engine.connect() as conn:
        kinds = conn.execute(text("SELECT family, kind FROM history ORDER BY id")).all()
    assert ("api_keys", "legacy") in kinds and ("signing_keys", "seal") in kinds
    assert _clgate(settings, "audit", "verify").returncode == 0
    with engine.begin() as conn:
        conn.execute(text("UPDATE api_keys SET role = 'admin' WHERE id = 'old'"))
    engine.dispose()
    edited = _clgate(settings, "audit", "verify")
    assert edited.returncode == 1 and "BROKEN history api_keys: seq 1 (record old)" in edited.stdout


@pytest.mark.integration
def test_rollback_to_an_older_snapshot_is_caught_on_postgresql(tmp_path, postgres_url):
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_url)
    _seed(settings)
    snapshot = _postgres_copies(postgres_url)("snapshot")  # the database as it was
    _add_event(settings, "key.revoked")
    store = open_store(settings)
    with store.sessions() as s:
        heads = history.signed_heads(s, store.signer)  # taken later, kept outside the database
    trusted = history.trusted_keys([store.signer.public])
    store.close()
    engine = create_engine(snapshot)  # what a restore of the snapshot would serve
    with make_sessionmaker(engine)() as s:
        assert all(r.problem is None for r in history.verify(s, trusted))  # consistent on its own
        why = {h["family"]: history.check_head(s, h, trusted) for h in heads}
    engine.dispose()
    assert why["audit_events"] is not None and "shorter" in why["audit_events"], why
    assert why["decisions"] is None  # a family that did not move since is still a prefix

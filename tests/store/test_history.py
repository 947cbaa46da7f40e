"""The tamper-evident history on SQLite and on a real PostgreSQL server: ``clgate audit verify`` (a real
process) passes an intact store and names the first broken link after an edit, a deletion, a deleted
tail or a backdated insert; on PostgreSQL the application role cannot TRUNCATE, UPDATE, DELETE or touch
the triggers, and still runs the service."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from clgate.store import open_store
from clgate.store.chain import BackdatedRecord, link_hash
from clgate.store.db import audit, session_scope
from clgate.store.models import AuditEvent, Decision, Job, Policy, Waiver
from clgate.store.settings import Settings

pytestmark = pytest.mark.timeout(300)


def _populate(settings: Settings) -> None:
    from clgate.service.auth import create_key

    store = open_store(settings, migrate=True)
    with session_scope(store.sessions) as s:
        create_key(s, name="k1", role="admin", actor="test")
        p = Policy(name="p", version="1", document={"rules": []}, sha256="0" * 64)
        s.add(p)
        s.flush()
        job = Job(mode="metrics", queue="cpu", model_name="m", policy_id=p.id, progress={})
        s.add(job)
        s.flush()
        audit(s, "test", "job.submitted", "job", job.id)
        d = Decision(
            job_id=job.id,
            policy_id=p.id,
            model_name="m",
            verdict="FAIL",
            headline={"mica": 0.25},
            document={"verdict": "FAIL", "rules": [{"value": 0.1 + 0.2}], "name": "ünïcode"},
        )
        s.add(d)
        s.flush()
        s.add(
            Waiver(
                decision_id=d.id,
                job_id=job.id,
                justification="a second approver reviewed it",
                approver="key:x(y)",
                expires_at=dt.datetime(2030, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            )
        )
        for i in range(3):
            audit(
                s,
                "test",
                f"thing.{i}",
                "thing",
                str(i),
                n=i,
                when=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            )
    store.close()


def _verify(settings: Settings, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env["CLGATE_DATA_DIR"] = str(settings.data_dir)
    if settings.database_url:
        env["CLGATE_DATABASE_URL"] = settings.database_url
    return subprocess.run(
        [sys.executable, "-m", "clgate", "audit", "verify", *extra],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tamper(engine, dialect: str, *statements: str) -> None:
    """What an attacker with the tables' owner rights does: get the triggers out of the way, then edit."""
    with engine.begin() as conn:
        for table in ("decisions", "waivers", "audit_events"):
            if dialect == "sqlite":
                conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_no_update"))
                conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_no_delete"))
            else:
                conn.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
        for statement in statements:
            conn.execute(text(statement))


def _check_tampering_is_named(settings: Settings, dialect: str) -> None:
    _populate(settings)
    ok = _verify(settings)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "ok audit_events: 5 records" in ok.stdout and "ok decisions: 1 records" in ok.stdout
    assert "ok waivers: 1 records" in ok.stdout
    head = next(line.split("head ", 1)[1] for line in ok.stdout.splitlines() if "audit_events" in line)
    assert _verify(settings, "--anchor", head).returncode == 0
    assert _verify(settings, "--anchor", "audit_events:2:" + "f" * 64).returncode == 1
    assert _verify(settings, "--anchor", "nonsense").returncode == 2

    engine = create_engine(settings.resolved_database_url())
    actor = "SELECT actor FROM audit_events WHERE seq = 3"
    with engine.connect() as conn:
        original = conn.execute(text(actor)).scalar()
    _tamper(engine, dialect, "UPDATE audit_events SET actor = 'mallory' WHERE seq = 3")
    edited = _verify(settings)
    assert edited.returncode == 1
    assert "BROKEN audit_events: seq 3" in edited.stdout and "edited" in edited.stdout, edited.stdout
    _tamper(engine, dialect, f"UPDATE audit_events SET actor = '{original}' WHERE seq = 3")
    assert _verify(settings).returncode == 0  # the content, not the act of writing, is what is checked

    _tamper(engine, dialect, "UPDATE decisions SET verdict = 'PASS'")
    flipped = _verify(settings)
    assert flipped.returncode == 1 and "BROKEN decisions: seq 1" in flipped.stdout, flipped.stdout
    _tamper(
        engine,
        dialect,
        "UPDATE decisions SET verdict = 'FAIL'",
        "UPDATE waivers SET expires_at = NULL",
    )
    waived = _verify(settings)
    assert waived.returncode == 1 and "BROKEN waivers: seq 1" in waived.stdout, waived.stdout
    _tamper(engine, dialect, "DELETE FROM waivers")
    assert "BROKEN waivers: head" in _verify(settings).stdout  # a deleted tail: the head says where it ended

    _tamper(engine, dialect, "DELETE FROM audit_events WHERE seq = 2")
    deleted = _verify(settings)
    assert deleted.returncode == 1 and "BROKEN audit_events: seq 2" in deleted.stdout, deleted.stdout
    assert "deleted" in deleted.stdout
    engine.dispose()


def test_verify_names_the_first_broken_link_on_sqlite(tmp_path):
    _check_tampering_is_named(Settings(data_dir=tmp_path / "data"), "sqlite")


@pytest.mark.integration
def test_verify_names_the_first_broken_link_on_postgresql(tmp_path, postgres_url):
    _check_tampering_is_named(Settings(data_dir=tmp_path / "data", database_url=postgres_url), "postgresql")


def test_backdated_records_are_refused_and_detected(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    _populate(settings)
    store = open_store(settings)
    with pytest.raises(BackdatedRecord, match="precede"), session_scope(store.sessions) as s:
        s.add(
            AuditEvent(
                actor="mallory",
                action="job.cancelled",
                subject_type="job",
                subject_id="x",
                at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
            )
        )
    # written by hand with a correct hash, a backdated event still breaks the time order
    with store.engine.begin() as conn:
        seq, prev = conn.execute(
            text("SELECT seq, record_hash FROM chain_heads WHERE chain = 'audit_events'")
        ).one()
        at = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
        content = {
            "at": at,
            "actor": "mallory",
            "action": "job.cancelled",
            "subject_type": "job",
            "subject_id": "x",
            "details": {},
            "project": None,
        }
        digest = link_hash("audit_events", seq + 1, prev, content)
        conn.execute(
            text(
                "INSERT INTO audit_events (at, actor, action, subject_type, subject_id, details, seq, "
                "prev_hash, record_hash) VALUES (:at, 'mallory', 'job.cancelled', 'job', 'x', '{}', "
                ":seq, :prev, :h)"
            ),
            {"at": "2000-01-01 00:00:00.000000", "seq": seq + 1, "prev": prev, "h": digest},
        )
        conn.execute(
            text("UPDATE chain_heads SET seq = :seq, record_hash = :h WHERE chain = 'audit_events'"),
            {"seq": seq + 1, "h": digest},
        )
    store.close()
    result = _verify(settings)
    assert result.returncode == 1 and "backdated" in result.stdout, result.stdout


@pytest.mark.integration
def test_application_role_on_postgresql(
    tmp_path, postgres_url, app_factory, test_client_class, admin_key, example_log, gate_example_log
):
    owner = create_engine(postgres_url)
    with owner.begin() as conn:
        conn.execute(text("CREATE ROLE clgate_app LOGIN"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLGATE_")}
    env.update(CLGATE_DATA_DIR=str(tmp_path / "data"), CLGATE_DATABASE_URL=postgres_url)
    for argv in (["db", "upgrade"], ["db", "grant", "clgate_app"]):
        r = subprocess.run(
            [sys.executable, "-m", "clgate", *argv],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "clgate", "db", "grant", "no_such_role"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "does not exist" in bad.stderr

    app_url = postgres_url.replace("//clgate@", "//clgate_app@")
    # the service runs as the application role: keys, policy, upload, a job to its decision, the audit trail
    app, _ = app_factory(database_url=app_url, auto_migrate=False)
    h = {"X-API-Key": admin_key}
    with test_client_class(app) as c:
        job = gate_example_log(c, h, example_log)
        assert job["state"] == "succeeded" and job["verdict"] == "FAIL", job
        other = c.post("/v1/keys", json={"name": "second", "role": "approver"}, headers=h).json()["key"]
        r = c.post(
            f"/v1/jobs/{job['id']}/waivers",
            json={"justification": "accepted for the pilot only"},
            headers={"X-API-Key": other},
        )
        assert r.status_code == 201, r.text

    app_engine = create_engine(app_url)
    refused = [
        "TRUNCATE audit_events",
        "TRUNCATE decisions",
        "TRUNCATE waivers",
        "UPDATE decisions SET verdict = 'PASS'",
        "UPDATE audit_events SET actor = 'x'",
        "UPDATE waivers SET expires_at = NULL",
        "DELETE FROM audit_events",
        "DELETE FROM decisions",
        "DELETE FROM waivers",
        "ALTER TABLE audit_events DISABLE TRIGGER ALL",
        "ALTER TABLE decisions DISABLE TRIGGER USER",
        "DROP TRIGGER audit_events_append_only ON audit_events",
        "DROP FUNCTION decisions_append_only() CASCADE",
        "CREATE TRIGGER t BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION "
        "audit_events_append_only()",
        "UPDATE history SET signature = 'x'",
        "DELETE FROM history",
        "TRUNCATE history",
        "DELETE FROM signing_keys",
        "ALTER TABLE history DISABLE TRIGGER USER",
    ]
    for statement in refused:
        with (
            app_engine.connect() as conn,
            pytest.raises(Exception, match=r"permission denied|must be owner") as err,
        ):
            conn.execute(text(statement))
        assert "append-only" not in str(err.value), (
            statement
        )  # refused for lack of rights, before any trigger
    settings = Settings(data_dir=tmp_path / "data", database_url=postgres_url)
    assert _verify(settings).returncode == 0
    # what the application role can still do without the signing key is named by `audit verify`
    with app_engine.begin() as conn:
        conn.execute(text("UPDATE api_keys SET role = 'admin' WHERE name = 'second'"))
        conn.execute(
            text("UPDATE jobs SET state = 'running', finished_at = NULL WHERE id = :j"), {"j": job["id"]}
        )
        conn.execute(
            text(
                "INSERT INTO waivers (id, decision_id, job_id, justification, approver, created_at, project, "
                "seq, prev_hash, record_hash) SELECT 'forged', decision_id, job_id, 'out of nothing', "
                "'key:self', now(), project, seq + 1, record_hash, :h FROM waivers"
            ),
            {"h": "0" * 64},
        )
    app_engine.dispose()
    caught = _verify(settings)
    assert caught.returncode == 1, caught.stdout
    for named in ("history api_keys: seq", "history jobs: seq", "history waivers: table (record forged)"):
        assert f"BROKEN {named}" in caught.stdout, caught.stdout
    owner.dispose()


def test_grants_are_only_what_the_application_needs():
    from clgate.store.db import app_role_grants
    from clgate.store.models import Base

    grants = app_role_grants(sorted(Base.metadata.tables))
    for table in ("decisions", "waivers", "audit_events", "job_files", "history", "signing_keys"):
        assert grants[table] == "SELECT, INSERT", table
    assert grants["chain_heads"] == "SELECT, UPDATE"
    assert all("TRUNCATE" not in g and "TRIGGER" not in g and "REFERENCES" not in g for g in grants.values())


def test_old_data_gets_the_default_project_and_a_chain(tmp_path):
    """A store at revision 0001 with records: the upgrade gives them the default project and chains them."""
    from clgate.store.db import upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO policies (id, name, version, document, sha256, created_at) "
                "VALUES ('p1', 'p', '1', '{}', :h, '2026-01-01 00:00:00')"
            ),
            {"h": "0" * 64},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, mode, queue, model_name, policy_id, state, progress, "
                "cancel_requested, attempts, created_at) VALUES ('j1', 'metrics', 'cpu', 'old', 'p1', "
                "'succeeded', '{}', 0, 1, '2026-01-01 00:00:01')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO decisions (id, job_id, policy_id, model_name, verdict, headline, document, "
                "created_at) VALUES ('d1', 'j1', 'p1', 'old', 'FAIL', '{}', '{\"a\": 1}', "
                "'2026-01-01 00:00:02')"
            )
        )
        for i in range(2):
            conn.execute(
                text(
                    "INSERT INTO audit_events (at, actor, action, subject_type, subject_id, details) "
                    f"VALUES ('2026-01-01 00:00:0{i}', 'a', 'x', 'job', 'j1', '{{}}')"
                )
            )
    engine.dispose()
    settings = Settings(data_dir=tmp_path / "data", database_url=url)
    open_store(settings, migrate=True).close()
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT project FROM jobs")).scalar() == "default"
        assert conn.execute(text("SELECT project FROM models WHERE name = 'old'")).scalar() == "default"
        assert conn.execute(text("SELECT seq FROM decisions")).scalar() == 1
    engine.dispose()
    assert _verify(settings).returncode == 0
    assert Path(tmp_path / "old.db").is_file()


def test_verify_refuses_a_store_that_is_not_migrated(tmp_path):
    result = _verify(Settings(data_dir=tmp_path / "empty"))
    assert result.returncode == 2 and "clgate db upgrade" in result.stderr


def _concurrent_appends(settings: Settings, threads: int = 4, each: int = 15) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from clgate.store.chain import verify

    store = open_store(settings, migrate=True)

    def append(worker: int) -> None:
        for i in range(each):
            with session_scope(store.sessions) as s:
                audit(s, f"worker-{worker}", "thing.done", "thing", f"{worker}-{i}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(append, range(threads)))
    with store.sessions() as s:
        reports = {r.chain: r for r in verify(s)}
    store.close()
    assert reports["audit_events"].broken is None, reports["audit_events"].broken
    assert reports["audit_events"].records == threads * each == reports["audit_events"].head_seq


def test_concurrent_appends_keep_one_chain_on_sqlite(tmp_path):
    _concurrent_appends(Settings(data_dir=tmp_path / "data"))


@pytest.mark.integration
def test_concurrent_appends_keep_one_chain_on_postgresql(tmp_path, postgres_url):
    _concurrent_appends(Settings(data_dir=tmp_path / "data", database_url=postgres_url))

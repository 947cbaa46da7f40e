"""The store's queries on their own (no HTTP): the project scope, immutable policy versions, keys, and
the refusals the API answers with their status."""

from __future__ import annotations

import pytest

from clgate.store import keys, policies
from clgate.store.db import make_engine, make_sessionmaker, session_scope, upgrade
from clgate.store.errors import Conflict, Forbidden, Invalid, NotFound
from clgate.store.models import Job
from clgate.store.scope import Scope

POLICY = {
    "format": "clgate.policy/v1",
    "name": "floor",
    "version": "1",
    "rules": [{"id": "mica-floor", "metric": "mica", "floor": 0.2}],
}


@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'q.db'}"
    upgrade(url)
    return make_sessionmaker(make_engine(url))


def _key(s, role: str, project: str):
    record, _ = keys.create_key(s, name=f"{role}-{project}", role=role, project=project, actor="test")
    return record


def test_refusals_carry_the_status_the_api_answers_with():
    assert [e("x").status for e in (NotFound, Forbidden, Conflict, Invalid)] == [404, 403, 409, 422]


def test_a_record_of_another_project_is_missing_even_to_its_admin_and_only_global_admin_crosses(sessions):
    with session_scope(sessions) as s:
        mine, other, admin = _key(s, "approver", "a"), _key(s, "viewer", "b"), _key(s, "admin", "b")
        anywhere = _key(s, "global_admin", "b")
        policy, created = policies.publish(s, POLICY, where=Scope(mine), actor="test")
        assert created
        job = Job(project="a", mode="metrics", queue="cpu", model_name="m", policy_id=policy.id, progress={})
        s.add(job)
        s.flush()
        assert Scope(mine).job(s, job.id) is job
        for key in (other, admin):  # a project's admin is a key of its project like any other
            with pytest.raises(NotFound, match=f"no job {job.id}"):
                Scope(key).job(s, job.id)
            with pytest.raises(NotFound, match=f"no job {job.id}"):
                Scope(key).job(s, job.id, act="cancel")
        assert Scope(anywhere).job(s, job.id) is job
        assert Scope(anywhere).job(s, job.id, act="waive") is job  # the explicit global role acts across
        with pytest.raises(NotFound):
            policies.get(s, Scope(other), "floor", "1")
        with pytest.raises(Forbidden, match="project: this key manages project 'b' only"):
            Scope(admin).may_manage(project="a", role="viewer")
        with pytest.raises(Forbidden, match="role: only a global_admin"):
            Scope(admin).may_manage(project="b", role="global_admin")
        Scope(admin).may_manage(project="b", role="admin")
        Scope(anywhere).may_manage(project="a", role="global_admin")


def test_policy_versions_are_immutable(sessions):
    with session_scope(sessions) as s:
        where = Scope(_key(s, "approver", "a"))
        first, created = policies.publish(s, POLICY, where=where, actor="test")
        again, created_again = policies.publish(s, POLICY, where=where, actor="test")
        assert created and not created_again and again.id == first.id
        changed = {**POLICY, "rules": [{**POLICY["rules"][0], "floor": 0.3}]}
        with pytest.raises(Conflict, match="versions are immutable"):
            policies.publish(s, changed, where=where, actor="test")
        with pytest.raises(Invalid, match="policy floor version 2 does not exist in project 'a'"):
            policies.find(s, "floor", "2", "a")


def test_keys_first_admin_once_and_revoke(sessions):
    key = keys.first_admin(sessions, actor="test")
    assert key is not None and keys.split_key(key) is not None
    assert keys.first_admin(sessions, actor="test") is None
    with session_scope(sessions) as s:
        record = keys.verify(s, key)
        assert record is not None and record.role == "global_admin"  # the first key crosses projects
        keys.revoke(s, record.id, actor="test")
    with session_scope(sessions) as s:
        assert keys.verify(s, key) is None
        with pytest.raises(NotFound, match="no key nope"):
            keys.revoke(s, "nope", actor="test")

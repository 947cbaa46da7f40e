"""A plug-in metric that asks for a gauge is exported like a built-in's: named from the registry, valued
from each model's latest decision (its headline's ``plugins``)."""

from __future__ import annotations

import datetime as dt

import pytest
from prometheus_client import CollectorRegistry

from clgate.service.metrics import HEADLINE, StoreCollector, headline_gauges
from clgate.store.db import make_engine, make_sessionmaker, session_scope, upgrade
from clgate.store.models import Decision, Job, Policy, utcnow


@pytest.fixture
def sessions(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    upgrade(url)
    return make_sessionmaker(make_engine(url))


def _seed(sessions, headlines: dict[str, dict]) -> None:
    t0 = utcnow() - dt.timedelta(hours=1)
    with session_scope(sessions) as s:
        p = Policy(name="p", version="1", document={}, sha256="0" * 64)
        s.add(p)
        s.flush()
        for i, (model, headline) in enumerate(headlines.items()):
            job = Job(
                mode="metrics", queue="cpu", model_name=model, policy_id=p.id, state="succeeded", progress={}
            )
            s.add(job)
            s.flush()
            s.add(
                Decision(
                    job_id=job.id,
                    policy_id=p.id,
                    model_name=model,
                    verdict="PASS",
                    created_at=t0 + dt.timedelta(minutes=i),
                    headline=headline,
                    document={},
                )
            )


def test_a_plugin_gauge_is_exported_from_the_latest_decisions(sessions, plugins_on, example_site):
    plugins_on(example_site)
    gauges = headline_gauges()
    assert gauges[: len(HEADLINE)] == HEADLINE
    name = "clgate_plugin_cost_weighted_acc_ratio"
    assert [g for g in gauges if g[0] == "cost_weighted_acc"] == [
        (
            "cost_weighted_acc",
            name,
            "Cost-weighted class accuracy (plug-in clgate-example-metrics) of the latest decision.",
        )
    ]
    _seed(sessions, {"alpha": {"mica": 0.5, "plugins": {"cost_weighted_acc": 0.7}}, "beta": {"mica": 0.4}})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(sessions, queue_lengths=dict))
    v = registry.get_sample_value
    assert v(name, {"project": "default", "model": "alpha"}) == 0.7
    assert v(name, {"project": "default", "model": "beta"}) is None  # decided without the plug-in
    assert v("clgate_model_mica_ratio", {"project": "default", "model": "alpha"}) == 0.5


def test_without_plugins_only_the_builtin_gauges(plugins_on):
    plugins_on()
    assert headline_gauges() == HEADLINE

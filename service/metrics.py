"""Prometheus export computed from the record store, once per deployment.

:class:`StoreCollector` reads the stored decisions, jobs, heartbeats and the broker's queue lengths at
every scrape, so the values survive restarts. These series describe the *deployment*, not a process:
exported by every API replica, Grafana's sums and KEDA's queries would count them once per replica.
So they are exported by exactly one process per deployment:

- Celery mode (``CLGATE_BROKER_URL`` set; any number of API replicas): ``clgate exporter`` on its own
  metrics port (:func:`exporter_registry`); the API's ``/metrics`` carries only per-process series
  (:func:`api_registry`: ``clgate_api_info`` and the ``process_*`` collector).
- Embedded mode (one API process runs the jobs): the API's ``/metrics`` carries both.

The collectors are registered on registries built here (never the global one); the quality gauges'
names and help texts are the metric registry's (:attr:`clgate.metrics.registry.MetricInfo.gauge`), the
aggregates come from :mod:`clgate.store.stats`.

Names follow Prometheus conventions: fractions end in ``_ratio``, durations in ``_seconds``, counters
in ``_total``; labels are bounded (model names are validated, worst classes are the worst
``CLGATE_WORST_CLASSES`` only, verdicts/states/queues/modes are fixed sets). Model and decision series
carry the ``project`` that owns the model, so that each team's dashboards and alerts see its own.

An NI/NIC decision judges cells (a class on one task's sample group, ``"cat @ night"``), and no label
that says ``class_name`` holds a cell's name: its worst-class series ranks the real classes pooled over
their cells, ``clgate_model_worst_cell_accuracy_ratio`` ranks the cells (``cell``, ``class_name``,
``group``; exported only when some decision has cells), and its class-regression series adds a ``cell``
label. An NC decision's series are exactly what they were.

The API's ``/metrics`` answers a key with its own project's series only (:class:`ProjectView`: a series
with another ``project`` label is left out, and so is the signed history's length); a ``global_admin`` key
sees every project's. The
exporter's port has no keys: it is for the deployment's Prometheus, on the internal network only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker

from clgate._version import __version__
from clgate.metrics.registry import REGISTRY, plugin_registry
from clgate.schemas.vocab import JOB_MODES, JOB_STATES, QUEUES, VERDICTS
from clgate.store import history, stats
from clgate.store.models import DEFAULT_PROJECT, as_utc, utcnow

log = logging.getLogger("clgate.metrics")

STATES = JOB_STATES
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
REGRESSION = "clgate_model_class_regression_ratio"
WORST_CELL = "clgate_model_worst_cell_accuracy_ratio"
HEADLINE = tuple(  # (headline key, metric name, help): the metrics the registry exports as gauges
    (m.id, m.gauge.name, m.gauge.help) for m in REGISTRY.values() if m.gauge is not None
)
assert REGRESSION in {name for _, name, _ in HEADLINE}


def headline_gauges() -> tuple[tuple[str, str, str], ...]:
    """The built-ins' gauges (:data:`HEADLINE`) and those of the installed plug-in metrics that ask for one
    (their final value in the headline's ``plugins``), one per series name."""
    gauges = list(HEADLINE)
    taken = {name for _, name, _ in HEADLINE}
    for m in plugin_registry().values():
        if m.gauge is not None and m.gauge.name not in taken:
            taken.add(m.gauge.name)
            gauges.append((m.id, m.gauge.name, m.gauge.help))
    return tuple(gauges)


def _cell_owners(headline: dict) -> dict[str, str]:
    """NI/NIC decisions: each cell's name → the name of its class (from ``pooled_classes``)."""
    return {cell: str(p.get("name", p.get("id"))) for p in headline["pooled_classes"] for cell in p["cells"]}


def cell_labels(headline: dict, cell: str) -> dict[str, str]:
    """The labels that name a cell of an NI/NIC decision truthfully: ``cell`` (its name, ``"<class> @
    <group>"``), ``class_name`` (its class) and ``group`` (its sample group); ``""`` where unknown.

    >>> h = {"pooled_classes": [{"id": 0, "name": "cat", "cells": ["cat @ day", "cat @ night"]}]}
    >>> cell_labels(h, "cat @ night")
    {'cell': 'cat @ night', 'class_name': 'cat', 'group': 'night'}
    """
    owner = _cell_owners(headline).get(cell, "")
    prefix = f"{owner} @ "
    group = cell[len(prefix) :] if owner and cell.startswith(prefix) else ""
    return {"cell": cell, "class_name": owner, "group": group}


def regression_labels(project: str, model: str, headline: dict) -> dict[str, str]:
    """The class-regression series' labels: ``class_name`` names the class that dropped most; in an NI/NIC
    decision (which judges cells) that class is the cell's class and ``cell`` names the cell."""
    named = str(headline.get("class_regression_class") or "")
    if headline.get("pooled_classes") is None:
        return {"project": project, "model": model, "class_name": named}
    labels = cell_labels(headline, named) if named else {"cell": "", "class_name": ""}
    return {"project": project, "model": model, "class_name": labels["class_name"], "cell": labels["cell"]}


def worst_ranked(headline: dict) -> list[tuple[float, dict[str, str]]]:
    """The classes of ``clgate_model_worst_class_accuracy_ratio``, worst first: the decision's worst classes
    (NC), or in an NI/NIC decision its real classes pooled over their cells (``worst_classes`` names
    cells there; they go to :func:`worst_cells`)."""
    pooled = headline.get("pooled_classes")
    listed = (headline.get("worst_classes") or []) if pooled is None else pooled
    ranked = [c for c in listed if c.get("accuracy") is not None]
    ranked.sort(key=lambda c: c["accuracy"])
    return [(float(c["accuracy"]), {"class_name": str(c.get("name", c.get("id")))}) for c in ranked]


def worst_cells(headline: dict) -> list[tuple[float, dict[str, str]]]:
    """NI/NIC decisions: the worst cells, worst first, with :func:`cell_labels`; empty for an NC one."""
    if headline.get("pooled_classes") is None:
        return []
    ranked = [c for c in headline.get("worst_classes") or [] if c.get("accuracy") is not None]
    ranked.sort(key=lambda c: c["accuracy"])
    return [(float(c["accuracy"]), cell_labels(headline, str(c.get("name", c.get("id"))))) for c in ranked]


class StoreCollector(Collector):
    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        queue_lengths: Callable[[], dict[str, int]],
        worst_classes: int = 3,
        worker_stale_s: float = 60.0,
    ) -> None:
        self.sessions = sessions
        self.queue_lengths = queue_lengths
        self.worst_classes = worst_classes
        self.worker_stale_s = worker_stale_s

    def describe(self) -> list[Metric]:
        return []  # values come from the database at scrape time

    def collect(self) -> Iterator[Metric]:
        with self.sessions() as s:
            yield from self._models(s)
            yield from self._decisions(s)
            yield from self._jobs(s)
            yield from self._workers(s)
            yield self._history(s)
        lengths = GaugeMetricFamily("clgate_queue_length", "Jobs waiting in the queue.", labels=["queue"])
        try:
            for queue, n in self.queue_lengths().items():
                lengths.add_metric([queue], n)
        except Exception:
            log.debug("queue lengths unavailable", exc_info=True)
        yield lengths

    def _models(self, s: Session) -> Iterator[Metric]:
        rows = stats.latest_decisions(s)
        exported = headline_gauges()
        name_of = {key: name for key, name, _ in exported}
        gauges = {
            key: GaugeMetricFamily(
                name,
                text,
                labels=["project", "model", "class_name"] if name == REGRESSION else ["project", "model"],
            )
            for key, name, text in exported
        }
        worst = GaugeMetricFamily(
            "clgate_model_worst_class_accuracy_ratio",
            f"Final accuracy of the model's {self.worst_classes} worst classes (latest decision); "
            "rank 1 is the worst.",
            labels=["project", "model", "rank", "class_name"],
        )
        verdict = GaugeMetricFamily(
            "clgate_model_verdict",
            "1 for the verdict of the model's latest decision.",
            labels=["project", "model", "verdict"],
        )
        stamp = GaugeMetricFamily(
            "clgate_model_last_decision_timestamp_seconds",
            "When the model's latest decision was made (Unix time).",
            labels=["project", "model"],
        )
        cells = GaugeMetricFamily(
            WORST_CELL,
            f"NI/NIC logs: final accuracy of the model's {self.worst_classes} worst cells (a class on one "
            "task's sample group; latest decision); rank 1 is the worst.",
            labels=["project", "model", "rank", "cell", "class_name", "group"],
        )
        seen = set()
        for model, v, headline, at, project in rows:
            if model in seen:  # two decisions in the same instant: keep one
                continue
            seen.add(model)
            headline = headline or {}
            plugin_values = headline.get("plugins") or {}
            for key, _, _ in exported:
                value = headline.get(key) if key in REGISTRY else plugin_values.get(key)
                if not isinstance(value, (int, float)):
                    continue
                if key == "class_regression":  # the class the alert names ("" if not recorded)
                    gauges[key].add_sample(
                        name_of[key], regression_labels(project, model, headline), float(value)
                    )
                else:
                    gauges[key].add_metric([project, model], float(value))
            for rank, (accuracy, labels) in enumerate(worst_ranked(headline)[: self.worst_classes], 1):
                worst.add_metric([project, model, str(rank), labels["class_name"]], accuracy)
            for rank, (accuracy, labels) in enumerate(worst_cells(headline)[: self.worst_classes], 1):
                cells.add_sample(
                    WORST_CELL, {"project": project, "model": model, "rank": str(rank)} | labels, accuracy
                )
            for name in VERDICTS:
                verdict.add_metric([project, model, name], 1.0 if v == name else 0.0)
            stamp.add_metric([project, model], as_utc(at).timestamp())
        yield from gauges.values()
        yield worst
        if cells.samples:  # only NI/NIC decisions have cells: an NC deployment's exposition is unchanged
            yield cells
        yield verdict
        yield stamp

    def _history(self, s: Session) -> Metric:
        entries = GaugeMetricFamily(
            "clgate_history_entries",
            "Signed history entries per record family (a fall means truncation or rollback).",
            labels=["family"],
        )
        for family, n in history.lengths(s).items():
            entries.add_metric([family], n)
        return entries

    def _decisions(self, s: Session) -> Iterator[Metric]:
        counts = stats.decision_counts(s)
        total = CounterMetricFamily(
            "clgate_decisions",
            "Gate decisions recorded, by project and verdict.",
            labels=["project", "verdict"],
        )
        for project in sorted({p for p, _ in counts} | {DEFAULT_PROJECT}):
            for v in VERDICTS:
                total.add_metric([project, v], float(counts.get((project, v), 0)))
        yield total

    def _jobs(self, s: Session) -> Iterator[Metric]:
        counts = stats.job_counts(s)
        jobs = GaugeMetricFamily(
            "clgate_jobs", "Jobs in the store, by state and queue.", labels=["state", "queue"]
        )
        for st in STATES:
            for q in QUEUES:
                jobs.add_metric([st, q], float(counts.get((st, q), 0)))
        yield jobs

        hist = HistogramMetricFamily(
            "clgate_job_duration_seconds", "Run time of finished jobs (start to end).", labels=["mode"]
        )
        rows = stats.durations(s, DURATION_BUCKETS)
        for mode in JOB_MODES:
            count, total, *cumulative = rows.get(mode, (0, 0.0, *([0] * len(DURATION_BUCKETS))))
            buckets = [
                (repr(b), float(c or 0)) for b, c in zip(DURATION_BUCKETS, cumulative, strict=False)
            ] + [("+Inf", float(count))]
            hist.add_metric([mode], buckets, float(total or 0.0))
        yield hist

        oldest = GaugeMetricFamily(
            "clgate_oldest_job_age_seconds",
            "Age of the oldest queued job (since submission) or running job (since start).",
            labels=["state"],
        )
        now = utcnow()
        for state, at in stats.oldest(s).items():
            oldest.add_metric([state], max(0.0, (now - as_utc(at)).total_seconds()) if at else 0.0)
        yield oldest

    def _workers(self, s: Session) -> Iterator[Metric]:
        fresh = time.time() - self.worker_stale_s
        counts = dict.fromkeys(QUEUES, 0)
        for hb in stats.heartbeats(s):
            if as_utc(hb.last_seen).timestamp() >= fresh:
                for q in hb.queues.split(","):
                    if q in counts:
                        counts[q] += 1
        workers = GaugeMetricFamily(
            "clgate_workers", "Workers that reported in the last minute, by queue consumed.", labels=["queue"]
        )
        for q, n in counts.items():
            workers.add_metric([q], float(n))
        yield workers


class ApiInfoCollector(Collector):
    """``clgate_api_info``: one per API process, so that each replica is a scrape target with a series."""

    def __init__(self, version: str, store_metrics: bool) -> None:
        self.version = version
        self.store_metrics = store_metrics

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "clgate_api_info",
            "1 per API process; store_metrics: whether this process also exports the deployment's series.",
            labels=["version", "store_metrics"],
        )
        info.add_metric([self.version, str(self.store_metrics).lower()], 1.0)
        yield info


#: Series that count every project's records and have no ``project`` label to narrow them by: left out of a
#: project's view (the signed history's length per family is what ``GET /v1/audit/heads`` refuses it).
DEPLOYMENT_ONLY = frozenset({"clgate_history_entries"})


class ProjectView:
    """``registry`` as a key of ``project`` may see it: series labelled with another project are left out,
    and so are the :data:`DEPLOYMENT_ONLY` ones (other series without a ``project`` label — process, queue,
    worker, job counts — stay). ``project=None``: every series (a ``global_admin`` key)."""

    def __init__(self, registry: CollectorRegistry, project: str | None) -> None:
        self.registry = registry
        self.project = project

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if self.project is None:
                yield family
                continue
            if family.name in DEPLOYMENT_ONLY:
                continue
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [
                s for s in family.samples if s.labels.get("project", self.project) == self.project
            ]
            yield kept


def api_registry(
    sessions: sessionmaker[Session],
    *,
    store_metrics: bool,
    queue_lengths: Callable[[], dict[str, int]],
    worst_classes: int = 3,
    worker_stale_s: float = 60.0,
    process_metrics: bool = True,
) -> CollectorRegistry:
    """The API's ``/metrics``: per-process series, plus the store's when ``store_metrics`` (embedded mode).

    ``process_metrics=False`` (several API processes behind one address, ``clgate serve --workers N``):
    no ``process_*`` series, since a scrape reaches whichever process accepts it and they would jump
    between processes; ``clgate_api_info`` is the same in each, so every scrape gives the same series."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ApiInfoCollector(__version__, store_metrics))
    if process_metrics:
        ProcessCollector(registry=registry)
    if store_metrics:
        registry.register(
            StoreCollector(
                sessions,
                queue_lengths=queue_lengths,
                worst_classes=worst_classes,
                worker_stale_s=worker_stale_s,
            )
        )
    return registry


def exporter_registry(
    sessions: sessionmaker[Session],
    *,
    queue_lengths: Callable[[], dict[str, int]],
    worst_classes: int = 3,
    worker_stale_s: float = 60.0,
) -> CollectorRegistry:
    """``clgate exporter``'s registry: the deployment's series from the store and the broker."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        StoreCollector(
            sessions, queue_lengths=queue_lengths, worst_classes=worst_classes, worker_stale_s=worker_stale_s
        )
    )
    return registry

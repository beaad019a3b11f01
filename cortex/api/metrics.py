"""Prometheus metrics of one API app, in one process or across gunicorn workers.

Without ``$PROMETHEUS_MULTIPROC_DIR`` every app has its own registry (tests never
share counters) and ``/metrics`` exposes it. With it (gunicorn, see
``etc/cortex/gunicorn.conf.py``), prometheus-client's multi-process mode writes each
worker's values to files in that directory and ``/metrics`` aggregates all workers
with ``MultiProcessCollector``: counters and histograms add up, the decision queue
depth is summed over live workers. The variable must be set before the worker
imports prometheus-client, which gunicorn.conf.py does.

Scrape-time metrics come from :class:`KnowledgeCollector`, computed in the worker
that answers the scrape: the age of its knowledge (``cortex_knowledge_age_seconds``)
and the fleet KPIs and GPU energy of its view, rendered once per knowledge version
(a series per host and resource class: at 10,000 hosts 100,000 lines, which took
prometheus-client 1.0-1.4 s of the worker's interpreter on every scrape).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from cortex.knowledge import kpis
from cortex.knowledge.cache import KnowledgeCache, KnowledgeUnavailable
from cortex.knowledge.commitments import free_holds
from cortex.knowledge.energy import EnergySettings, host_power, zone_energy
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline import memo
from cortex.scheduler.metrics import SchedulerMetrics

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class ApiMetrics:
    """The API's metrics: the scheduling calls' (``scheduler``), the decision log's.

    Names follow Prometheus conventions (``_total``, ``_seconds``).

    ``multiprocess`` is decided once, from the environment at construction.
    """

    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self.registry = CollectorRegistry()
        self._scrape_collectors: list[Any] = []
        self.scheduler = SchedulerMetrics(self.registry)
        self.decisions_dropped = Counter(
            "cortex_decisions_dropped", "Decision records dropped (queue full or write failed).",
            registry=self.registry)
        self.decisions_unstorable = Counter(
            "cortex_decisions_unstorable",
            "Decision records the database refused as built (a NUL, a lone surrogate, a "
            "number it cannot hold); each was written again sanitised, or dropped and "
            "counted in cortex_decisions_dropped too. Its batch-mates are written.",
            registry=self.registry)
        self.decision_queue_depth = Gauge(
            "cortex_decision_queue_depth", "Decision records waiting to be written.",
            registry=self.registry, multiprocess_mode="livesum")
        self.knowledge_rows_skipped = Counter(
            "cortex_knowledge_rows_skipped",
            "Rows a knowledge load could not read and left out, by table, counted at each "
            "load of a view (a row that stays unreadable is counted again at the next "
            "version); the service log names each row's key.",
            ("table",), registry=self.registry)

    def add_scrape_collector(self, collector: Any) -> None:
        """Add a collector evaluated at scrape time in the answering worker.

        A collector with a ``rendered()`` method (:class:`KnowledgeCollector`) also adds
        the text it returns: families it keeps rendered in the text format.
        """
        self._scrape_collectors.append(collector)
        if not self.multiprocess:
            self.registry.register(collector)

    def exposition(self) -> bytes:
        """The text exposition: this app's registry, or every worker's values.

        The rendered families of the scrape collectors follow (the text format is a
        sequence of families; their names are not in the registry).
        """
        if not self.multiprocess:
            body = generate_latest(self.registry)
        else:
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            for collector in self._scrape_collectors:
                registry.register(collector)
            body = generate_latest(registry)
        return body + b"".join(collector.rendered() for collector in self._scrape_collectors
                               if hasattr(collector, "rendered"))


class ReservationFeedCollector:
    """Scrape-time state of the answering worker's reservation feed.

    ``cortex_reservation_feed_listening``: 1 while the worker counts in-flight
    reservations from memory, 0 while it reads them from the table on every call
    (listener down or not yet started, or no trigger). Nothing without a feed (SQLite,
    ``reservation_feed = false``).
    """

    def __init__(self, store: Any) -> None:
        self._store = store

    def describe(self) -> list[Metric]:
        """Nothing up front: the family exists only with a feed."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The listening gauge, when the store has a feed."""
        listening = self._store.listening
        if listening is not None:
            yield GaugeMetricFamily(
                "cortex_reservation_feed_listening",
                "1: this worker counts in-flight reservations from memory (NOTIFY feed); "
                "0: it reads them from the table on every call.", value=int(listening))


class StepAnswersCollector:
    """Scrape-time size of the answering worker's kept step answers.

    ``cortex_step_answers_kept``: host answers the worker's step tables hold room for in
    its current knowledge version (:mod:`cortex.pipeline.memo`: a host of the fleet per
    table); ``cortex_step_answers_limit``: ``[scheduler]
    step_memo_size``, the most it keeps. With ``cortex_step_answers_dropped_total``
    (counted by the scheduler) they size the option: a worker at its limit that keeps
    dropping answers asks its steps again for shapes it had answered.
    """

    def __init__(self, cache: KnowledgeCache, limit: int) -> None:
        self._cache = cache
        self._limit = limit

    def describe(self) -> list[Metric]:
        """Nothing up front, like the other scrape-time collectors."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Both gauges; the kept answers are 0 before the worker has a view."""
        view = self._cache.current
        kept = memo.store_of(view, self._limit).size if view is not None and self._limit else 0
        yield GaugeMetricFamily(
            "cortex_step_answers_kept", "Host answers of pipeline steps this worker keeps "
            "room for in its knowledge version (a host of the fleet per step table).",
            value=kept)
        yield GaugeMetricFamily(
            "cortex_step_answers_limit", "Host answers of pipeline steps a worker keeps at "
            "most ([scheduler] step_memo_size).", value=self._limit)


class KnowledgeCollector:
    """Scrape-time metrics of a worker's KnowledgeCache and the KPIs of its view.

    ``cortex_knowledge_age_seconds{source="database"}``: seconds since the cache last
    read the knowledge version; ``sync_ages()`` adds one sample per sync source
    (``placement``, ``nova``, ...: seconds since its last successful sync). KPI and
    energy families (:func:`kpi_families`, per host unless ``host_utilization`` is
    False; :func:`energy_families` with ``energy``, the ``[energy]`` settings) depend on
    the view alone: :meth:`rendered` renders them in the text format once per view.
    """

    def __init__(self, cache: KnowledgeCache,
                 sync_ages: Callable[[], list[tuple[str, float]]] = list,
                 energy: EnergySettings | None = None,
                 host_utilization: bool = True) -> None:
        self._cache = cache
        self._host_utilization = host_utilization
        self._sync_ages = sync_ages
        self._energy = energy or EnergySettings()
        self._rendered: tuple[KnowledgeView | None, bytes] = (None, b"")

    def describe(self) -> list[Metric]:
        """Nothing up front: the families depend on the fleet (registry checks skip us)."""
        return []

    def _view(self) -> KnowledgeView | None:
        """The current view (refreshed when due), else the last one (None: never loaded)."""
        try:
            return self._cache.view()
        except KnowledgeUnavailable:
            return self._cache.current

    def collect(self) -> Iterator[Metric]:
        """Age and version of the current view, its commitments (live)."""
        view = self._view()
        age = GaugeMetricFamily("cortex_knowledge_age_seconds",
                                "Seconds since this worker last read the knowledge.",
                                labels=["source"])
        if self._cache.age() is not None:
            age.add_metric(["database"], self._cache.age())
        for source, seconds in self._sync_ages():
            age.add_metric([source], seconds)
        yield age
        if view is None:
            return
        yield GaugeMetricFamily("cortex_knowledge_version",
                                "Knowledge version of this worker's view.", value=view.version)
        yield commitment_family(view, datetime.now(UTC))

    def families(self, view: KnowledgeView) -> list[Metric]:
        """The families of ``view`` that :meth:`rendered` renders: KPIs and energy."""
        return [*kpi_families(view, self._host_utilization),
                *energy_families(view, self._energy)]

    def rendered(self) -> bytes:
        """:meth:`families` of the current view in the text format (b"" without a view).

        Rendered once per view, then the same bytes at every scrape.
        """
        view = self._view()
        if view is None:
            return b""
        cached_view, text = self._rendered
        if cached_view is not view:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Families(self.families(view)))
            text = generate_latest(registry)
            self._rendered = (view, text)
        return text


class _Families:
    """A collector of families computed already (for rendering them on their own)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        """The families."""
        return self._families


def energy_families(view: KnowledgeView, settings: EnergySettings) -> list[Metric]:
    """GPU power and carbon gauges of ``view`` (see :mod:`cortex.knowledge.energy`).

    ``cortex_host_gpu_power_watts{host, availability_zone, source}`` per host whose
    power is known (only with ``settings.export_hosts``); per availability zone with a
    GPU host: ``cortex_zone_carbon_intensity_grams_per_kwh{availability_zone, source}``,
    and where some host's power is known ``cortex_zone_gpu_power_watts`` and
    ``cortex_zone_carbon_emission_grams_per_hour`` (``{availability_zone}``).
    """
    families: list[Metric] = []
    if settings.export_hosts:
        host = GaugeMetricFamily(
            "cortex_host_gpu_power_watts", "Power drawn by a host's GPUs, in watts: DCGM's "
            "reading (source dcgm), else the sum of what its agent read from NVML (nvml).",
            labels=["host", "availability_zone", "source"])
        for state in view.hosts.values():
            watts, source = host_power(state)
            if watts is not None:
                host.add_metric([state.host, kpis.zone_of(state), source or ""], watts)
        families.append(host)
    power = GaugeMetricFamily(
        "cortex_zone_gpu_power_watts", "Power drawn by the GPUs of a zone's hosts whose power "
        "is known, in watts.", labels=["availability_zone"])
    intensity = GaugeMetricFamily(
        "cortex_zone_carbon_intensity_grams_per_kwh", "Carbon intensity of a zone's grid in "
        "gCO2/kWh: Prometheus' mean over its hosts (prometheus), [energy] carbon_intensity "
        "(config) or default_carbon_intensity (default).", labels=["availability_zone", "source"])
    emission = GaugeMetricFamily(
        "cortex_zone_carbon_emission_grams_per_hour", "Grams of CO2 per hour the GPU power of "
        "a zone emits at its carbon intensity (watts / 1000 * gCO2/kWh).",
        labels=["availability_zone"])
    for zone in zone_energy(view, settings.intensities, settings.default_intensity):
        intensity.add_metric([zone.availability_zone, zone.intensity_source],
                             zone.carbon_intensity)
        if zone.power_watts is not None and zone.grams_per_hour is not None:
            power.add_metric([zone.availability_zone], zone.power_watts)
            emission.add_metric([zone.availability_zone], zone.grams_per_hour)
    return [*families, power, intensity, emission]


def commitment_family(view: KnowledgeView, now: datetime) -> GaugeMetricFamily:
    """``cortex_committed_gpus{availability_zone, products, state}`` of the active commitments.

    ``reserved``: the GPUs of every hold; ``used``: of the holds the owners' instances
    consume; ``idle``: of the free ones (reserved = used + idle). ``products``: the PCI
    product ids the commitment accepts, ``|``-joined (``any``). Computed at every scrape:
    a commitment stops counting when it ends, whatever the knowledge version.
    """
    family = GaugeMetricFamily(
        "cortex_committed_gpus", "GPUs of active committed reservations: reserved, used by "
        "their owners' instances, idle.", labels=["availability_zone", "products", "state"])
    totals: dict[tuple[str, str, str], float] = {}
    for commitment in view.commitments:
        if not commitment.active(now):
            continue
        key = (commitment.availability_zone or "", "|".join(commitment.products) or "any")
        free = len(free_holds(commitment, view.hosts))
        for state, holds in (("reserved", len(commitment.holds)),
                             ("used", len(commitment.holds) - free), ("idle", free)):
            totals[(*key, state)] = totals.get((*key, state), 0.0) + holds * commitment.gpus
    for labels, value in sorted(totals.items()):
        family.add_metric(list(labels), value)
    return family


def kpi_families(view: KnowledgeView, per_host: bool = True) -> list[Metric]:
    """The fleet KPIs of ``view`` as gauge families (see cortex.knowledge.kpis).

    ``per_host`` False leaves out ``cortex_host_utilization_ratio`` (a series per host
    and resource class) and its deprecated twin (``[api] export_host_utilization``).
    """
    host_ratio = GaugeMetricFamily(
        "cortex_host_utilization_ratio", "Used over allocatable capacity of a resource class "
        "on a host (Placement: (total - reserved) * allocation_ratio).",
        labels=["host", "availability_zone", "resource_class"])
    for host in view.hosts.values() if per_host else ():
        for rc, usage in kpis.host_usage(host).items():
            if usage.ratio is not None:
                host_ratio.add_metric([host.host, kpis.zone_of(host), rc], usage.ratio)
    zone_ratio = GaugeMetricFamily(
        "cortex_availability_zone_utilization_ratio",
        "Used over allocatable capacity of a resource class, summed over a zone's hosts.",
        labels=["availability_zone", "resource_class"])
    for (zone, rc), usage in kpis.zone_usage(view).items():
        if usage.ratio is not None:
            zone_ratio.add_metric([zone, rc], usage.ratio)
    free = GaugeMetricFamily("cortex_gpus_free", "GPUs (or vGPUs) free on schedulable hosts.",
                             labels=["model", "availability_zone"])
    used = GaugeMetricFamily("cortex_gpus_used", "GPUs (or vGPUs) allocated.",
                             labels=["model", "availability_zone"])
    for count in kpis.gpu_counts(view):
        free.add_metric([count.model, count.availability_zone], count.free)
        used.add_metric([count.model, count.availability_zone], count.used)
    stranded = GaugeMetricFamily(
        "cortex_gpus_stranded", "Free passthrough GPUs on hosts with fewer free GPUs of the "
        "model than request_gpus: they cannot serve a request of that size.",
        labels=["model", "availability_zone", "request_gpus"])
    for (model, zone, size), count in kpis.stranded_gpus(view).items():
        stranded.add_metric([model, zone, str(size)], count)
    kept = (host_ratio, zone_ratio) if per_host else (zone_ratio,)
    return [*kept, free, used, stranded, *(_deprecated(family) for family in kept)]


def _deprecated(family: GaugeMetricFamily) -> GaugeMetricFamily:
    """``family`` again under its former name (``utilisation``), said to be deprecated.

    Dashboards and alerts written for the former names keep working for a release.
    """
    old = GaugeMetricFamily(family.name.replace("utilization", "utilisation"),
                            f"Deprecated: use {family.name}. {family.documentation}")
    old.samples = [sample._replace(name=sample.name.replace("utilization", "utilisation"))
                   for sample in family.samples]
    return old

"""Prometheus metrics of one API app (a registry per app, so tests never share counters)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ApiMetrics:
    """The API's metrics; names follow Prometheus conventions (``_total``, ``_seconds``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_duration = Histogram(
            "cortex_scheduler_request_duration_seconds",
            "Time to answer an external scheduler call.", ["service", "pipeline", "status"],
            registry=self.registry,
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.requests = Counter(
            "cortex_scheduler_requests", "External scheduler calls answered.",
            ["service", "pipeline", "intent", "outcome"], registry=self.registry)
        self.decisions_dropped = Counter(
            "cortex_decisions_dropped", "Decision records dropped (queue full or write failed).",
            registry=self.registry)
        self.decision_queue_depth = Gauge(
            "cortex_decision_queue_depth", "Decision records waiting to be written.",
            registry=self.registry)
        self.knowledge_version = Gauge(
            "cortex_knowledge_version", "Knowledge version of this worker's view.",
            registry=self.registry)

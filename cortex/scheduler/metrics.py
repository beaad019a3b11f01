"""The scheduling calls' Prometheus metrics, declared on the registry the API exposes.

Names follow Prometheus conventions (``_total``, ``_seconds``, base units). The API's
``/metrics`` (:mod:`cortex.api.metrics`) owns the registry and the exposition; the
scheduler service counts into these.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

_STEP_BUCKETS = (.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5)


class SchedulerMetrics:
    """Counters and histograms of external scheduling calls, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._steps: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.request_duration = Histogram(
            "cortex_scheduler_request_duration_seconds",
            "Time to answer an external scheduler call.", ["service", "pipeline", "status"],
            registry=registry,
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.requests = Counter(
            "cortex_scheduler_requests", "External scheduler calls answered.",
            ["service", "pipeline", "intent", "outcome"], registry=registry)
        self.step_duration = Histogram(
            "cortex_pipeline_step_duration_seconds", "Time one pipeline step took.",
            ["pipeline", "step"], registry=registry, buckets=_STEP_BUCKETS)
        self.hosts_removed = Counter(
            "cortex_pipeline_hosts_removed", "Hosts removed by a filter (shadow steps: none).",
            ["pipeline", "step"], registry=registry)
        self.reordered = Counter(
            "cortex_pipeline_reordered",
            "Answers by whether the caller's first choice (highest weight) was kept first.",
            ["pipeline", "first_choice"], registry=registry)
        self.gpu_placements = Counter(
            "cortex_gpu_placements",
            "Multi-GPU Nova requests answered with a first host that reports its topology, "
            "by whether that host has enough free GPUs all joined by NVLink.",
            ["pipeline", "nvlink"], registry=registry)
        self.unpromised_answers = Counter(
            "cortex_scheduler_unpromised_answers",
            "Nova calls answered without an in-flight reservation because the reservation "
            "store failed or did not answer in time ([scheduler] promise_failure_policy = "
            "answer).", ["service"], registry=registry)
        self.disbelieved_intents = Counter(
            "cortex_scheduler_disbelieved_intents",
            "Nova calls whose claimed intent (_nova_check_type or the flags) the body's "
            "flags and spec do not back; answered as creates.", ["claimed"],
            registry=registry)
        self.vmware_flag_contradictions = Counter(
            "cortex_scheduler_vmware_flag_contradictions",
            "Nova calls whose vmware flag (the label: true or false) every offered host the "
            "knowledge knows contradicts (all KVM, or all VMware); their pipeline was chosen "
            "by the hosts' hypervisor type.", ["flag"], registry=registry)
        for flag in ("true", "false"):
            self.vmware_flag_contradictions.labels(flag)  # shown as 0 until one comes
        self.group_placements = Counter(
            "cortex_group_placements",
            "Groups placed all or nothing (cortex.scheduler.groups), by outcome: placed "
            "(every member's room promised at the first call), refused_whole (fewer than "
            "min_count fit: nothing promised), expired (slots no member took).",
            ["service", "outcome"], registry=registry)
        self.no_valid_host = Counter(
            "cortex_scheduler_no_valid_host",
            "Live calls answered with no host (Nova's NoValidHost), by cause: the filter "
            "step that removed the last hosts, or commitments (other projects' committed "
            "room), reservations (in-flight), unknown_hosts, no_candidates "
            "(cortex.scheduler.refusals).", ["service", "pipeline", "cause"],
            registry=registry)
        self.step_answers_dropped = Counter(
            "cortex_step_answers_dropped",
            "Host answers of pipeline steps a worker dropped to stay within [scheduler] "
            "step_memo_size; rising steadily: the limit is too small for the request "
            "shapes asked, and their steps are asked again.", registry=registry)

    def prepare(self, service: str, pipeline: str, steps: Any) -> None:
        """Make the series a live call of ``pipeline`` counts into, before one comes.

        ``steps``: the step names. Each series starts at 0 and is shown so from then on
        (Prometheus' advice for labels known in advance). A series is made on its first
        use; in gunicorn's multiprocess mode that writes every bucket of a histogram to
        the worker's metric file: ~320 values and several milliseconds in a fresh
        worker's first GPU call, which the warm-up (:mod:`cortex.services.warmup`) spares it.
        """
        for name in steps:
            self.step(pipeline, name)
        self.request_duration.labels(service, pipeline, "200")
        self.requests.labels(service, pipeline, "create", "ok")
        for choice in ("kept", "changed"):
            self.reordered.labels(pipeline, choice)

    def step(self, pipeline: str, step: str) -> tuple[Any, Any]:
        """``(duration histogram, hosts removed counter)`` of one step, looked up once.

        ``labels()`` validates and locks on every call; a pipeline has ~30 steps per
        request, so the children are kept in a plain dict (0.5 us instead of 2.5 us).
        """
        key = (pipeline, step)
        found = self._steps.get(key)
        if found is None:
            found = self._steps[key] = (self.step_duration.labels(pipeline, step),
                                        self.hosts_removed.labels(pipeline, step))
        return found

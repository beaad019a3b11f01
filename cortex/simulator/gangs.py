"""Gangs with and without all or nothing: what partial groups hold, and when jobs start.

A gang is a distributed job of 4, 8 or 16 members of one whole 8-GPU board each
(:class:`GangSpec`): useless until its last member runs. Jobs arrive over time
(exponential gaps sized for ``load`` of the fleet's GPUs by Little's law) and each try
is a Nova multi-create: one call per member, with the try's own request id, through the
scheduler service with the in-flight reservations, then nova-compute's claim of the
first host that takes the member (:mod:`cortex.simulator.groups` places its calls the
same way).

- **Member by member** (``all_or_nothing=False``): the store keeps no group promises, so
  each member is promised as a lone create. When a member finds no host, Nova fails the
  whole request and gives back the claims made, but the promises of the members
  answered before it stay counted until their time-to-live ends: room a partial group
  holds that nobody can use.
- **All or nothing**: the store keeps group promises (:mod:`cortex.scheduler.promise`):
  the first call promises every member's room or is refused with nothing held.

A job that did not start tries again ``retry_s`` later, until ``give_up_s`` after its
arrival. Measured per run (:class:`GangRun`): jobs started, the time from arrival to
start, the GPU-hours held by the promises of partial groups, the calls made.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from cortex.pipeline.config import PipelineSet
from cortex.request.nova import NovaRequest
from cortex.scheduler.service import SchedulerService, SchedulerSettings, simulation
from cortex.simulator.cloud import EPOCH, SimCloud
from cortex.simulator.fleet import Fleet, SimulationError
from cortex.simulator.groups import Group, _body
from cortex.store.memory import MemoryReservations

#: Student's t, two-sided 95 %, by degrees of freedom (1..9); 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)


@dataclass(frozen=True)
class GangSpec:
    """A generated gang trace: ``jobs`` jobs of ``sizes`` members of ``gpus`` GPUs each.

    ``load``: offered GPU load of the fleet; ``mean_duration``, ``retry_s``,
    ``give_up_s`` and ``ttl`` (the reservations' time-to-live) in seconds.
    """

    jobs: int = 60
    load: float = 0.9
    seed: int = 1
    sizes: tuple[int, ...] = (4, 8, 16)
    gpus: int = 8
    mean_duration: float = 3600.0
    retry_s: float = 120.0
    give_up_s: float = 4 * 3600.0
    ttl: float = 300.0


def gang_trace(fleet: Fleet, spec: GangSpec) -> list[Group]:
    """The jobs of ``spec`` on ``fleet``: arrivals and durations drawn with ``spec.seed``."""
    rng = random.Random(spec.seed)
    mean_gpus = sum(spec.sizes) / len(spec.sizes) * spec.gpus
    rate = spec.load * fleet.gpus / (spec.mean_duration * mean_gpus)
    clock, jobs = 0.0, []
    for index in range(spec.jobs):
        clock += rng.expovariate(rate)
        jobs.append(Group(f"j{index:04d}", rng.choice(spec.sizes), spec.gpus, clock,
                          clock + rng.expovariate(1 / spec.mean_duration)))
    return jobs


@dataclass
class GangRun:
    """One replay's outcome: per job its start delay (s) or None; held GPU-seconds."""

    all_or_nothing: bool
    waits: dict[str, float | None] = field(default_factory=dict)
    held_gpu_s: float = 0.0
    calls: int = 0
    wall_s: float = 0.0

    @property
    def started(self) -> int:
        """Jobs that started."""
        return sum(1 for w in self.waits.values() if w is not None)

    def mean_wait_min(self) -> float:
        """Mean minutes from arrival to start of the jobs that started."""
        waits = [w for w in self.waits.values() if w is not None]
        return statistics.fmean(waits) / 60 if waits else 0.0


class _Replay:
    """The event loop of one :func:`replay_gangs` run."""

    def __init__(self, fleet: Fleet, pipelines: PipelineSet, pipeline: str, spec: GangSpec,
                 all_or_nothing: bool, seed: int) -> None:
        self.cloud = SimCloud(fleet)
        self.store = MemoryReservations(groups=all_or_nothing)
        settings = SchedulerSettings(unknown_host_policy="drop", request_time_budget=0,
                                     reservation_ttl=spec.ttl)
        self.service = SchedulerService(pipelines, self.cloud, settings,
                                        reservations=self.store)
        self.pipeline, self.spec = pipeline, spec
        self.rng = random.Random(seed)
        self.hosts = [{"host": h.name, "hypervisor_hostname": h.name} for h in fleet.hosts]
        self.run = GangRun(all_or_nothing)

    def attempt(self, job: Group, tries: int, clock: float) -> list[tuple[str, str]] | None:
        """One try of ``job`` at ``clock``: its members' claims, or None (all given back)."""
        now = EPOCH + timedelta(seconds=clock)
        try_job = Group(f"{job.id}-t{tries}", job.size, job.gpus, clock, job.departure)
        placed: list[tuple[str, str]] = []
        for member in range(job.size):
            self.rng.shuffle(self.hosts)
            request = NovaRequest.from_body(_body(try_job, member, self.hosts, self.pipeline))
            decided = self.service.schedule(request, simulation(promise=True, now=now))
            self.run.calls += 1
            host = decided.result[0] if decided.result else None
            if host is None or self.cloud.hosts[host].claim(request.instance_uuid,
                                                            request) is None:
                break
            placed.append((host, str(request.instance_uuid)))
        if len(placed) == job.size:
            return placed
        for host, uuid in placed:  # Nova fails the request and gives the claims back
            self.cloud.hosts[host].release(uuid)
        # the try's promises still count until they expire, a time-to-live from now
        group = f"request:req-{try_job.id}"
        held = sum(1 for r in self.store.active(now) if r.group_id == group)
        self.run.held_gpu_s += held * job.gpus * self.spec.ttl
        return None

    def replay(self, jobs: list[Group]) -> GangRun:
        """Every job tried at its arrival, again every ``retry_s`` until it starts or gives up."""
        started = time.perf_counter()
        events: list[tuple[float, int, str, Any]] = []
        for order, job in enumerate(jobs):
            heapq.heappush(events, (job.arrival, order, "try", (job, 0)))
        order = len(jobs)
        while events:
            clock, _, kind, payload = heapq.heappop(events)
            if kind == "leave":
                for host, uuid in payload:
                    self.cloud.hosts[host].release(uuid)
                self.store.drop(uuid for _, uuid in payload)
                continue
            job, tries = payload
            placed = self.attempt(job, tries, clock)
            if placed is not None:
                self.run.waits[job.id] = clock - job.arrival
                order += 1
                heapq.heappush(events, (clock + (job.departure - job.arrival), order, "leave",
                                        placed))
            elif clock + self.spec.retry_s - job.arrival <= self.spec.give_up_s:
                order += 1
                heapq.heappush(events, (clock + self.spec.retry_s, order, "try",
                                        (job, tries + 1)))
            else:
                self.run.waits[job.id] = None
        self.run.wall_s = time.perf_counter() - started
        return self.run


def replay_gangs(fleet: Fleet, jobs: list[Group], pipelines: PipelineSet, pipeline: str,
                 spec: GangSpec, all_or_nothing: bool, seed: int = 1) -> GangRun:
    """Replay ``jobs`` through ``pipeline`` with or without all or nothing (module doc)."""
    if pipeline not in pipelines.pipelines:
        raise SimulationError(f"unknown pipeline {pipeline!r}")
    return _Replay(fleet, pipelines, pipeline, spec, all_or_nothing, seed).replay(jobs)


def interval(values: list[float]) -> str:
    """``mean ± half-width`` of the 95 % confidence interval (Student's t)."""
    if len(values) < 2:
        return f"{values[0]:.1f}" if values else "n/a"
    t = _T95[len(values) - 2] if len(values) - 1 <= len(_T95) else 1.96
    half = t * statistics.stdev(values) / math.sqrt(len(values))
    return f"{statistics.fmean(values):.1f} ± {half:.1f}"


COLUMNS = ("placement", "seeds", "jobs", "started", "mean wait to start (min)",
           "GPU-hours held by partial groups", "calls")


def table(runs: dict[bool, list[GangRun]], jobs: int) -> str:
    """A Markdown table: one row per mode, each cell the mean ± 95 % interval over seeds."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for mode, found in sorted(runs.items()):
        cells = ("all or nothing" if mode else "member by member", str(len(found)), str(jobs),
                 interval([float(r.started) for r in found]),
                 interval([r.mean_wait_min() for r in found]),
                 interval([r.held_gpu_s / 3600 for r in found]),
                 interval([float(r.calls) for r in found]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

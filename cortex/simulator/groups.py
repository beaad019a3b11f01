"""Groups of GPU VMs on a leaf/spine fleet: a synthetic trace, its replay, the domain measure.

Each group (2-16 VMs of 4 or 8 GPUs, a multi-create with the hint
``placement_strategy=consolidated``) arrives at once; as Nova does, the simulator calls
the pipeline once per member with the group's request id. Nova offers the hosts in its
own order, which knows nothing of the fabric: every call's host list is shuffled
(seeded) with caller weights 0. Each call goes through the scheduler service with the
in-flight reservations exactly as the API's (promised in an in-memory store at the
group's simulated arrival time), then nova-compute claims the first host that takes it
(alternates as in :mod:`cortex.simulator.replay`). A group leaves as a whole at its departure.

The measure: the share of fully placed groups whose members sit within
their rule's domain: at most ``leaves_needed(size)`` leaves, connected by adjacency.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from cortex.pipeline.config import PipelineSet
from cortex.request.nova import NovaRequest
from cortex.rules.network_domains import leaves_needed
from cortex.scheduler.service import SchedulerService, SchedulerSettings, simulation
from cortex.simulator.cloud import EPOCH, SimCloud
from cortex.simulator.fleet import Fleet, SimulationError
from cortex.simulator.replay import request_body
from cortex.simulator.trace import TraceRequest
from cortex.store.memory import MemoryReservations

SIZES = (2, 2, 3, 4, 4, 6, 8, 8, 12, 16)  # group sizes drawn with these odds
TTL = 60.0  # simulated seconds a reservation lives: a group's calls all come at its arrival
SETTINGS = SchedulerSettings(unknown_host_policy="drop", request_time_budget=0,
                             reservation_ttl=TTL)


@dataclass(frozen=True)
class GroupSpec:
    """A synthetic group trace: ``groups`` groups, ``load`` offered GPU load, ``seed``."""

    groups: int = 200
    load: float = 0.8
    seed: int = 1
    mean_duration: float = 3600.0


@dataclass(frozen=True)
class Group:
    """One group: ``size`` members of ``gpus`` GPUs each, arriving and leaving together."""

    id: str
    size: int
    gpus: int
    arrival: float
    departure: float


def group_trace(fleet: Fleet, spec: GroupSpec) -> list[Group]:
    """Groups with exponential gaps and durations, sized for ``spec.load`` of the fleet's GPUs.

    Mean GPUs in use ≈ arrival rate × mean duration × mean GPUs per group (Little's law).
    """
    rng = random.Random(spec.seed)
    mean_gpus = sum(SIZES) / len(SIZES) * 6  # members of 4 or 8 GPUs, equally likely
    rate = spec.load * fleet.gpus / (spec.mean_duration * mean_gpus)
    clock, groups = 0.0, []
    for index in range(spec.groups):
        clock += rng.expovariate(rate)
        groups.append(Group(f"g{index:04d}", rng.choice(SIZES), rng.choice((4, 8)), clock,
                            clock + rng.expovariate(1 / spec.mean_duration)))
    return groups


@dataclass
class GroupRun:
    """One pipeline's placements of a group trace: per group the leaves used, or rejected."""

    pipeline: str
    placed: list[tuple[Group, frozenset[str]]] = field(default_factory=list)
    rejected: int = 0
    calls: int = 0
    wall_s: float = 0.0
    adjacency: dict[str, frozenset[str]] = field(default_factory=dict)

    def within_rule(self, group: Group, leaves: frozenset[str]) -> bool:
        """Whether the group's leaves are no more than its rule asks and connected."""
        if not leaves or len(leaves) > leaves_needed(group.size):
            return False
        seen, todo = set(), [min(leaves)]
        while todo:
            leaf = todo.pop()
            seen.add(leaf)
            todo += [n for n in self.adjacency.get(leaf, ()) if n in leaves and n not in seen]
        return seen == set(leaves)

    def share_within_rule(self, sizes: tuple[int, int] = (1, 10**6)) -> float | None:
        """Share of placed groups of ``sizes`` (inclusive range) within their rule's domain."""
        found = [self.within_rule(g, leaves) for g, leaves in self.placed
                 if sizes[0] <= g.size <= sizes[1]]
        return sum(found) / len(found) if found else None

    def mean_leaves(self) -> float:
        """Mean leaves a placed group spans."""
        return sum(len(v) for _, v in self.placed) / len(self.placed) if self.placed else 0.0


def _body(group: Group, member: int, hosts: list[dict[str, str]], pipeline: str
          ) -> dict[str, Any]:
    """The Nova body of one member's call (a multi-create of the group's size)."""
    trace = TraceRequest(f"{group.id}-{member:02d}", group.arrival, group.departure, group.gpus,
                         0, 12 * group.gpus, 120 * 1024 * group.gpus,
                         numa_nodes=1 if group.gpus <= 4 else 2, numa_policy="legacy",
                         cpu_policy="dedicated")
    body = request_body(trace, hosts, {h["host"]: 0.0 for h in hosts}, pipeline)
    data = body["spec"]["nova_object.data"]
    data["num_instances"] = group.size
    data["scheduler_hints"] = {"placement_strategy": ["consolidated"]}
    body["context"]["request_id"] = f"req-{group.id}"
    return body


def replay_groups(fleet: Fleet, groups: list[Group], pipelines: PipelineSet, pipeline: str,
                  seed: int = 1, max_attempts: int = 3) -> GroupRun:
    """Place every group member by member through ``pipeline``; see the module docstring."""
    if pipeline not in pipelines.pipelines:
        raise SimulationError(f"unknown pipeline {pipeline!r}")
    if fleet.network is None:
        raise SimulationError(f"fleet {fleet.name} has no network topology (key 'network')")
    started, rng = time.perf_counter(), random.Random(seed)
    cloud, store = SimCloud(fleet), MemoryReservations()
    run = GroupRun(pipeline, adjacency={n: leaf.adjacent
                                        for n, leaf in cloud.network.leaves.items()})
    service = SchedulerService(pipelines, cloud, SETTINGS, reservations=store)
    hosts = [{"host": h.name, "hypervisor_hostname": h.name} for h in fleet.hosts]
    leaving: list[tuple[float, list[tuple[str, str]]]] = []
    for group in groups:
        for _, members in [x for x in leaving if x[0] <= group.arrival]:
            for host, uuid in members:
                cloud.hosts[host].release(uuid)
            store.drop(uuid for _, uuid in members)
        leaving = [x for x in leaving if x[0] > group.arrival]
        now = EPOCH + timedelta(seconds=group.arrival)
        placed = []
        for member in range(group.size):
            rng.shuffle(hosts)
            request = NovaRequest.from_body(_body(group, member, hosts, pipeline))
            decided = service.schedule(request, simulation(promise=True, now=now))
            run.calls += 1
            for name in decided.result[:max_attempts]:
                if cloud.hosts[name].claim(request.instance_uuid, request) is not None:
                    placed.append((name, request.instance_uuid))
                    break
        if len(placed) < group.size:
            run.rejected += 1
            for host, uuid in placed:
                cloud.hosts[host].release(uuid)
            store.drop(uuid for _, uuid in placed)
            continue
        run.placed.append((group, frozenset(cloud.network.leaf_of(h) for h, _ in placed)))
        leaving.append((group.departure, placed))
    run.wall_s = time.perf_counter() - started
    return run


COLUMNS = ("pipeline", "groups", "placed", "within rule's domain", "2–4 VMs", "5–8 VMs",
           "9–16 VMs", "leaves per group (mean)", "calls", "wall s")


def _percent(value: float | None) -> str:
    """``97.5 %`` or ``n/a``."""
    return "n/a" if value is None else f"{100 * value:.1f} %"


def table(runs: list[GroupRun], groups: int) -> str:
    """A Markdown table, one row per pipeline (see :data:`COLUMNS`)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for run in runs:
        cells = (f"`{run.pipeline}`", str(groups), str(len(run.placed)),
                 _percent(run.share_within_rule()), _percent(run.share_within_rule((2, 4))),
                 _percent(run.share_within_rule((5, 8))),
                 _percent(run.share_within_rule((9, 16))), f"{run.mean_leaves():.2f}",
                 str(run.calls), f"{run.wall_s:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)

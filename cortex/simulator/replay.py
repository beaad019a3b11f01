"""Replay a trace through a real pipeline, in process, and measure the placements.

For each arrival the simulator builds the Nova request body Nova would send (flavor with
``hw:cpu_policy``/``hw:numa_nodes``, ``resources:VGPU``, the InstancePCIRequest with
its specs and ``numa_policy``; every host of the fleet a candidate of weight 0, except
that a vGPU request is offered only hosts with one GPU that has room for all its vGPUs,
as Placement's allocation candidates would be, each GPU being its own resource
provider; a vGPU request naming a MIG profile asks the profile's trait, as an
operator's flavor does, and is offered only hosts with a free instance of it, each MIG
instance being a provider of one vGPU), parses it with :meth:`NovaRequest.from_body`,
decides it on the knowledge view of the simulated cloud through the scheduler service
(:class:`cortex.scheduler.service.SchedulerService`, exactly what the API runs, as a
simulation that promises and records nothing), and claims the request on the best host
as nova-compute would, falling back to the next hosts like Nova's alternates
(``max_attempts``). A departure frees what the
instance holds. Departures at the same time as an arrival go first.

Measures per arrival (:class:`Decision`): placed or not, the GPUs taken, whether a
multi-GPU set is all NVLink-connected and whether some host that passed the filters
had a free NVLink-connected set of that size for it, whether a host of the fleet holds an
NVLink-connected set of that size of a GPU model the request accepts at all (whole-host
capacity, :func:`nvlink_reach`), whether the GPUs sit on the NUMA
cells of the guest's CPUs, the decision time (parse + scheduler), and fragmentation
after it: free GPUs on hosts with fewer than 4 (8) free GPUs, which can serve no 4-
(8-) GPU request, counted on hosts with at least 4 (8) GPUs (:func:`stranded`).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from cortex.knowledge.view import KnowledgeView
from cortex.pipeline import memo
from cortex.pipeline.config import PipelineSet
from cortex.request.nova import NovaRequest
from cortex.rules.gpu_locality import candidate_mask
from cortex.rules.gpu_sets import gpu_map
from cortex.scheduler.service import (
    SchedulerService,
    SchedulerSettings,
    SchedulingFailed,
    simulation,
)
from cortex.simulator.boards import VENDOR_NVIDIA, mig_trait
from cortex.simulator.cloud import DEVICE_ORDERS, SimCloud
from cortex.simulator.fleet import Fleet, SimulationError
from cortex.simulator.policies import POLICIES, PolicyOrder, Workload, with_policies
from cortex.simulator.trace import TraceRequest

#: The simulated calls: hosts the cloud does not know are dropped, no time budget, no
#: in-flight reservations (each arrival is claimed before the next one is decided).
SETTINGS = SchedulerSettings(unknown_host_policy="drop", request_time_budget=0,
                             reservation_ttl=0)
SIMULATION = simulation()


@dataclass
class Decision:
    """One arrival: where it went (``host`` None: rejected, with ``reason``) and the measures."""

    index: int
    request_id: str
    gpus: int
    vgpus: int
    host: str | None
    reason: str | None
    devices: tuple[str, ...]
    nvlink: bool | None
    nvlink_possible: bool | None
    numa_local: bool | None
    decision_ms: float
    attempts: int
    frag4: int
    frag8: int
    free_gpus: float
    mispredicted: bool | None = None
    #: Multi-GPU placements: whether some host of the fleet holds, counting all its
    #: passthrough GPUs whatever their use, an NVLink-connected set of ``gpus`` GPUs of a
    #: model the request accepts (:func:`nvlink_reach`); None for the others.
    nvlink_fleet_possible: bool | None = None
    #: GPUs asked: ``gpus``, and where vGPUs share passthrough GPUs (boards with
    #: ``gpu_sharing: any``) also ``vgpus`` as their share of one GPU.
    demand: float = 0.0


@dataclass
class RunResult:
    """The decisions of one pipeline on one fleet and trace, and their summary."""

    pipeline: str
    fleet: str
    fleet_gpus: int
    decisions: list[Decision] = field(default_factory=list)
    wall_s: float = 0.0
    passthrough_gpus: int = 0

    def unallocated_pct_at(self, arrived_pct: float) -> float | None:
        """Weng et al.'s measure: unallocated GPUs (%) once the arrived demand reaches a level.

        "Beware of Fragmentation" (USENIX ATC '23) plots the share of the cluster's GPUs
        left unallocated against the workload arrived so far, in % of the cluster's GPUs.
        Here over the passthrough GPUs (vGPU requests go to the vGPU hosts, which are left
        out): the free passthrough GPUs (%) after the first arrival that brings the
        arrived passthrough GPUs to ``arrived_pct`` % of them. None when the trace never
        gets there. Meant for traces without departures (``fill`` mode).
        """
        if not self.passthrough_gpus:
            return None
        wanted, arrived = self.passthrough_gpus * arrived_pct / 100, 0.0
        for decision in self.decisions:
            arrived += decision.demand
            if arrived >= wanted:
                return 100 * decision.free_gpus / self.passthrough_gpus
        return None

    def unallocated_curve(self, levels: Sequence[float]) -> list[float | None]:
        """:meth:`unallocated_pct_at` at each of the ascending ``levels``, in one pass."""
        if not self.passthrough_gpus:
            return [None] * len(levels)
        found: list[float | None] = []
        arrived, decisions = 0.0, iter(self.decisions)
        decision = None
        for level in levels:
            wanted = self.passthrough_gpus * level / 100
            while decision is None or arrived < wanted:
                decision = next(decisions, None)
                if decision is None:
                    break
                arrived += decision.demand
            if decision is None:
                found.extend([None] * (len(levels) - len(found)))
                break
            found.append(100 * decision.free_gpus / self.passthrough_gpus)
        return found

    @property
    def placed(self) -> int:
        """Requests placed."""
        return sum(1 for d in self.decisions if d.host)

    @property
    def first_rejection(self) -> int | None:
        """1-based arrival number of the first request that found no host (None: none did)."""
        return next((d.index + 1 for d in self.decisions if d.host is None), None)

    def gpus_placed(self, kind: str = "gpus") -> int:
        """Passthrough GPUs (``gpus``) or vGPUs (``vgpus``) of the placed requests."""
        return sum(getattr(d, kind) for d in self.decisions if d.host)

    def first_rejection_of(self, kind: str) -> int | None:
        """1-based arrival number of the first rejected ``gpu`` (passthrough) or ``vgpu`` one."""
        return next((d.index + 1 for d in self.decisions if d.host is None
                     and (d.gpus if kind == "gpu" else d.vgpus)), None)

    @property
    def placed_before_first_rejection(self) -> int:
        """Requests placed before the first rejection (all of them when none was rejected)."""
        first = self.first_rejection
        return self.placed if first is None else first - 1

    def _multi(self) -> list[Decision]:
        return [d for d in self.decisions if d.host and d.gpus >= 2]

    @property
    def multi_gpu(self) -> int:
        """Placed requests of 2 or more passthrough GPUs."""
        return len(self._multi())

    @property
    def nvlink_share(self) -> float | None:
        """Share of multi-GPU placements whose GPUs are all NVLink-connected."""
        return _share(d.nvlink for d in self._multi())

    @property
    def nvlink_possible_share(self) -> float | None:
        """The same share among placements where the fleet offered an NVLink-connected set."""
        return _share(d.nvlink for d in self._multi() if d.nvlink_possible)

    @property
    def nvlink_fleet_share(self) -> float | None:
        """The fleet-level NVLink-complete share: 0..1, None without a counted placement.

        Among the placed requests of 2 or more passthrough GPUs whose accepted GPU models
        have an NVLink-connected set of the request's size on some host of the fleet
        (whole-host capacity, not the use at the time: :attr:`Decision.nvlink_fleet_possible`),
        the share placed on a set whose GPUs are all NVLink-connected. A request no host
        could ever give NVLink (no host of an accepted model has such a set, as a 4-GPU
        request on a PCIe-only model) is left out; one that could have had NVLink
        somewhere but did not get it counts against, even when every such set was busy
        when it arrived (where :attr:`nvlink_possible_share` leaves it out). The field's
        measure of topology-aware placement (a multi-GPU job on NVLink-connected GPUs or
        not) taken over the fleet, as Weng et al., "Beware of Fragmentation" (USENIX ATC
        '23), take fragmentation over the cluster rather than per decision.
        """
        return _share(d.nvlink for d in self._multi() if d.nvlink_fleet_possible)

    @property
    def misprediction_share(self) -> float | None:
        """Share of passthrough GPU placements whose GPUs are not those the model predicted.

        Only a tracker whose device order differs from the weighers' (the simulator's
        ``device_order = shuffled``) makes any.
        """
        return _share(d.mispredicted for d in self.decisions
                      if d.host and d.gpus and d.mispredicted is not None)

    @property
    def numa_local_share(self) -> float | None:
        """Share of GPU placements of guests with a NUMA topology whose GPUs are on its cells."""
        return _share(d.numa_local for d in self.decisions
                      if d.host and d.gpus and d.numa_local is not None)

    def mean(self, name: str) -> float:
        """Mean of a per-arrival measure (``frag4``, ``frag8``, ``free_gpus``)."""
        values = [getattr(d, name) for d in self.decisions]
        return statistics.fmean(values) if values else 0.0

    def decision_ms(self, quantile: float) -> float:
        """A quantile (0..1) of the decision time in milliseconds."""
        values = sorted(d.decision_ms for d in self.decisions)
        if not values:
            return 0.0
        return values[min(len(values) - 1, int(quantile * len(values)))]


def _share(values: Iterable[bool | None]) -> float | None:
    """Share of True among the values; None when there are none."""
    found = [bool(v) for v in values]
    return sum(found) / len(found) if found else None


def request_body(request: TraceRequest, hosts: list[dict[str, str]],
                 weights: dict[str, float], pipeline: str) -> dict[str, Any]:
    """The body Nova would POST for ``request`` with every host a candidate."""
    cells = max(1, request.numa_nodes)
    extra: dict[str, str] = {}
    if request.cpu_policy == "dedicated":
        extra["hw:cpu_policy"] = "dedicated"
    if request.numa_nodes:
        extra["hw:numa_nodes"] = str(request.numa_nodes)
    if request.vgpus:
        extra["resources:VGPU"] = str(request.vgpus)
    if request.mig_profile:
        extra[f"trait:{mig_trait(request.mig_profile)}"] = "required"
    data: dict[str, Any] = {
        "flavor": {"nova_object.data": {
            "name": f"sim.{request.gpus or request.vgpus}{'g' if request.gpus else 'v'}",
            "vcpus": request.vcpus, "memory_mb": math.ceil(request.memory_mb / cells) * cells,
            "root_gb": 0, "ephemeral_gb": 0, "swap": 0, "extra_specs": extra}},
        "image": {"nova_object.data": {"properties": {"nova_object.data": {}}}},
        "instance_uuid": request.id, "num_instances": 1, "project_id": "simulator"}
    if request.gpus:
        specs = [{"vendor_id": VENDOR_NVIDIA, "product_id": p} for p in request.products] or [
            {"vendor_id": VENDOR_NVIDIA}]
        data["pci_requests"] = {"nova_object.data": {"requests": [{"nova_object.data": {
            "count": request.gpus, "spec": specs, "alias_name": "gpu",
            "numa_policy": request.numa_policy or "legacy", "request_id": None}}]}}
    return {"spec": {"nova_object.name": "RequestSpec", "nova_object.data": data},
            "hosts": hosts, "weights": weights, "pipeline": pipeline,
            "context": {"request_id": f"req-{request.id}", "project_id": "simulator"}}


#: Steps whose answers read facts learned from the whole view, not only the host's state
#: (the energy weigher's per-model idle and busy draws): the fast replay asks them again
#: about every host after any change.
FLEET_LEARNED_STEPS = frozenset({"weigher_gpu_energy"})


class CarriedAnswers:
    """The cloud's views with the steps' per-host answers carried over (the fast replay).

    A slow replay hands the scheduler a new synced view after every claim and release, as
    a worker would after a knowledge reload; the pipeline keeps its steps' answers per
    host and request shape with that view (:mod:`cortex.pipeline.memo`), so every step
    judges every host again after each event. Here each new view is still a new synced
    view of every host (facts built per view, as the capacity tables, are built anew),
    but it takes over the previous view's answer store (:class:`CarriedStore`) and host
    index: a step asks again only about hosts whose state changed since it last judged
    them under the same request shape (steps of :data:`FLEET_LEARNED_STEPS` about every
    host). The decisions are the slow replay's (``tests/unit/test_simulator_fast.py``
    checks it on samples). One chain of views per request kind
    (:data:`cortex.simulator.cloud.KINDS`).
    """

    def __init__(self, cloud: SimCloud, limit: int = SETTINGS.step_memo_size) -> None:
        self.cloud = cloud
        self.limit = limit
        self._last: dict[str, tuple[KnowledgeView, CarriedStore, memo.HostIndex]] = {}

    def view(self) -> KnowledgeView:
        """The cloud's view now, holding the answers still valid from the last one."""
        current = self.cloud.view()
        kind = self.cloud.kind if self.cloud.flexible else "pci"
        last = self._last.get(kind)
        if last is not None and last[0] is current:
            return current
        if last is None:
            index = memo.host_index(current, "nova")
            store = CarriedStore(self.limit, len(index))
        else:
            previous, store, index = last
            states = previous.hosts
            changed = [index.positions[name] for name, state in current.hosts.items()
                       if state is not states[name]]
            store.changed(changed)
            current.derived(("host-index", "nova"), lambda _: index)
        current.derived(("step-answers", self.limit), lambda _: store)
        self._last[kind] = (current, store, index)
        return current


class CarriedStore(memo.AnswerStore):
    """An answer store that outlives its view: answers of changed hosts are forgotten.

    Each host position remembers the last change (:meth:`changed`, counted in changes of
    the cloud), each table the change it was last brought up to; a table handed out
    forgets the answers of the hosts changed since (every answer, for the steps of
    :data:`FLEET_LEARNED_STEPS`), so the cost of a change is paid only by the tables
    that are used again.
    """

    def __init__(self, limit: int, hosts: int) -> None:
        super().__init__(limit)
        self.change = 0
        self.changed_at = np.zeros(hosts, np.int64)
        self._seen: dict[Hashable, int] = {}

    def changed(self, positions: Sequence[int]) -> None:
        """The hosts at ``positions`` (of the host index) changed (a new view)."""
        self.change += 1
        if positions:
            self.changed_at[positions] = self.change

    def table(self, key: Hashable, size: int = 0, weighs: bool = False) -> memo.AnswerTable:
        """The table under ``key`` (see AnswerStore.table), brought up to the last change."""
        table = super().table(key, size, weighs)
        seen = self._seen.get(key)
        if seen is not None and seen < self.change:
            if key[0][0] in FLEET_LEARNED_STEPS:  # type: ignore[index]
                table.codes[:] = memo.UNKNOWN
            else:
                table.codes[self.changed_at > seen] = memo.UNKNOWN
            table.reserved.clear()
        self._seen[key] = self.change
        return table


#: The order the simulated Nova offers its hosts in. ``fleet``: the fleet's, as Nova's
#: host manager lists compute nodes (by database id: the order they registered) and, with
#: its defaults (``[filter_scheduler] shuffle_best_same_weighed_hosts = False``,
#: ``host_subset_size = 1``), takes the first of equally weighed hosts. ``shuffled``: a
#: fresh permutation per arrival, seeded by the seed and the arrival (the same for every
#: pipeline of a seed), as with ``shuffle_best_same_weighed_hosts = True`` or a host
#: manager that lists hosts in no fixed order.
CANDIDATE_ORDERS = ("fleet", "shuffled")


def replay(fleet: Fleet, trace: Sequence[TraceRequest], pipelines: PipelineSet, pipeline: str,
           max_attempts: int = 3, pack_numa_cells: bool = False,
           max_rejections: int | None = None,
           on_event: Callable[[str, TraceRequest, SimCloud], None] | None = None,
           device_order: str = "pci", seed: int = 0,
           request_sizes: Mapping[int, int] | None = None,
           candidate_order: str = "fleet", fast: bool = False,
           model_demand: Mapping[str, float] | None = None) -> RunResult:
    """Replay ``trace`` on a fresh copy of ``fleet`` through ``pipeline``.

    ``max_rejections`` stops the replay after that many rejected requests (a filled
    cloud rejects everything after). ``on_event(kind, request, cloud)`` is called after
    each arrival and departure (to inspect the cloud). ``device_order`` (and ``seed``):
    the simulated trackers' device order (:data:`cortex.simulator.cloud.DEVICE_ORDERS`);
    ``request_sizes``: the recorded creates' sizes the views carry (:class:`SimCloud`);
    ``model_demand``: their demand per GPU model, by default the trace's own
    (:meth:`SimCloud.model_demand_of`, what ``weigher_gpu_model_reserve`` learns).
    ``candidate_order``: the order the hosts are offered in (:data:`CANDIDATE_ORDERS`),
    which decides the ties. ``pipeline`` may also name a policy of
    :mod:`cortex.simulator.policies` (``fgd``, ``best-fit``), the trace its workload.
    ``fast``: reuse the steps' per-host answers between events (:class:`CarriedAnswers`).
    Raises SimulationError for an unknown pipeline or order.
    """
    if candidate_order not in CANDIDATE_ORDERS:
        raise SimulationError(f"unknown candidate order {candidate_order!r} (known: "
                              f"{', '.join(CANDIDATE_ORDERS)})")
    if device_order not in DEVICE_ORDERS:
        raise SimulationError(f"unknown device order {device_order!r} (known: "
                              f"{', '.join(DEVICE_ORDERS)})")
    policy = None
    if pipeline in POLICIES:
        pipelines = with_policies(pipelines, [pipeline])
    if pipeline not in pipelines.pipelines:
        raise SimulationError(f"unknown pipeline {pipeline!r} (known: "
                              f"{', '.join(sorted(pipelines.pipelines))})")
    started = time.perf_counter()
    cloud = SimCloud(fleet, pack_numa_cells, device_order, seed, request_sizes)
    cloud.model_demand = MappingProxyType(
        cloud.model_demand_of(trace) if model_demand is None else dict(model_demand))
    if pipeline in POLICIES:
        slots = next((h.vgpu_slots for h in cloud.hosts.values() if h.vgpu_slots), 1)
        policy = PolicyOrder(pipeline, Workload.of(trace, slots))
    source: SimCloud | CarriedAnswers = CarriedAnswers(cloud) if fast else cloud
    service = SchedulerService(pipelines, source, SETTINGS)
    hosts = [{"host": h.name, "hypervisor_hostname": h.name} for h in fleet.hosts]
    weights = dict.fromkeys(cloud.hosts, 0.0)
    result = RunResult(pipeline, fleet.name, fleet.gpus, passthrough_gpus=sum(
        host.passthrough_gpus() for host in cloud.hosts.values()))
    rejected, where, tally = 0, {}, Tally(cloud)
    reach = nvlink_reach(cloud)
    for kind, index, request in _events(trace):
        if kind == "departure":
            if request.id in where:
                name = where.pop(request.id)
                cloud.hosts[name].release(request.id)
                tally.update(cloud, name)
            if on_event:
                on_event(kind, request, cloud)
            continue
        offered, offered_weights = hosts, weights
        if candidate_order == "shuffled":
            offered = random.Random(f"{seed}:{index}").sample(hosts, len(hosts))
        if request.vgpus:
            offered = [h for h in offered if cloud.hosts[h["host"]].vgpu_room(
                request.vgpus, request.mig_profile)]
            offered_weights = {h["host"]: 0.0 for h in offered}
        cloud.kind = "vgpu" if request.vgpus else "pci"
        decision = _decide(cloud, source, service, index, request,
                           request_body(request, offered, offered_weights, pipeline),
                           max_attempts, tally, policy, reach)
        result.decisions.append(decision)
        if decision.host:
            where[request.id] = decision.host
        if on_event:
            on_event(kind, request, cloud)
        rejected += decision.host is None
        if max_rejections is not None and rejected >= max_rejections:
            break
    result.wall_s = time.perf_counter() - started
    return result


def _events(trace: Sequence[TraceRequest]) -> list[tuple[str, int, TraceRequest]]:
    """Arrivals and departures by time; departures first at equal times."""
    events = []
    for index, request in enumerate(trace):
        events.append((request.arrival, 1, index, "arrival", request))
        if request.departure is not None:
            events.append((max(request.departure, request.arrival), 0, index, "departure",
                           request))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    return [(kind, index, request) for _, _, index, kind, request in events]


def _decide(cloud: SimCloud, source: SimCloud | CarriedAnswers, service: SchedulerService,
            index: int, trace_request: TraceRequest, body: dict[str, Any],
            max_attempts: int, tally: Tally, policy: PolicyOrder | None,
            reach: Mapping[tuple[str, str], int]) -> Decision:
    """Decide one arrival and claim it on the first host that takes it.

    ``policy``: orders the hosts that passed the filters instead of the weighers;
    ``reach``: the fleet's largest NVLink-connected set per GPU model
    (:func:`nvlink_reach`, measured once per replay).
    """
    view = source.view()
    started = time.perf_counter()
    request = NovaRequest.from_body(body)
    try:
        decided = service.schedule(request, SIMULATION, started)
    except SchedulingFailed as exc:
        raise SimulationError(exc.detail) from None
    elapsed = (time.perf_counter() - started) * 1000
    host, reason, devices, cells, attempts = None, "no valid host", (), None, 0
    mispredicted = None
    ranked = list(decided.result)
    if policy is not None:
        ranked = policy.order(ranked, cloud.hosts, trace_request)
    for name in ranked[:max_attempts]:
        attempts += 1
        allocation = cloud.hosts[name].claim(trace_request.id, request)
        if allocation is not None:
            host, reason, devices, cells = name, None, allocation.gpus, allocation.cells
            mispredicted = set(allocation.gpus) != set(allocation.predicted)
            break
        reason = "claims failed on nova-compute"
    nvlink = possible = fleet_possible = local = None
    if host and trace_request.gpus:
        topology = view.hosts[host].topology
        gpus = gpu_map(topology)
        if trace_request.gpus >= 2:
            nvlink = gpus.all_linked(gpus.mask(devices), "nvlink")
            possible = _nvlink_possible(view, decided.result, request, trace_request.gpus)
            fleet_possible = nvlink_reachable(reach, trace_request.products,
                                              trace_request.gpus)
        if cells is not None:
            local = all(gpus.nodes[gpus.index[a]] in cells for a in devices)
    counts = tally.update(cloud, host)
    demand = float(trace_request.gpus)
    if cloud.flexible and trace_request.vgpus:
        demand += trace_request.vgpus / cloud.vgpu_slots
    return Decision(index, trace_request.id, trace_request.gpus, trace_request.vgpus, host,
                    reason, tuple(devices), nvlink, possible, local, elapsed, attempts,
                    stranded(counts, 4), stranded(counts, 8), tally.unallocated,
                    mispredicted if trace_request.gpus else None, fleet_possible, demand)


class Tally:
    """Per host its ``(free, all)`` passthrough GPUs and Weng et al.'s unallocated GPUs.

    Kept up to date host by host (:meth:`update` after a host changed), so measuring the
    fleet after an event costs no walk over every host's GPUs.
    """

    def __init__(self, cloud: SimCloud) -> None:
        self.counts = {name: (host.free_gpus(), host.passthrough_gpus())
                       for name, host in cloud.hosts.items()}
        self.free = {name: host.unallocated_gpus() for name, host in cloud.hosts.items()}
        self.unallocated = sum(self.free.values())

    def update(self, cloud: SimCloud, name: str | None) -> Iterable[tuple[int, int]]:
        """Measure host ``name`` again (None: none changed); the per-host counts."""
        if name is not None:
            host = cloud.hosts[name]
            self.counts[name] = (host.free_gpus(), host.passthrough_gpus())
            self.free[name] = host.unallocated_gpus()
            self.unallocated = sum(self.free.values())
        return self.counts.values()


def stranded(counts: Iterable[tuple[int, int]], k: int) -> int:
    """Free GPUs that cannot serve a k-GPU request on hosts that could when empty.

    ``counts``: ``(free, all)`` passthrough GPUs per host. Hosts with fewer than k GPUs
    are left out: their GPUs never serve k, whatever the placements.
    """
    return sum(free for free, total in counts if total >= k and free < k)


def _nvlink_possible(view: Any, hosts: Sequence[str], request: NovaRequest, k: int) -> bool:
    """Whether a host that passed the filters had k free matching GPUs joined by NVLink."""
    for name in hosts:
        topology = view.hosts[name].topology
        if topology is None or not topology.gpus:
            continue
        gpus = gpu_map(topology)
        if max(gpus.clique_sizes(candidate_mask(topology, gpus, request), "nvlink")) >= k:
            return True
    return False


def nvlink_reach(cloud: SimCloud) -> dict[tuple[str, str], int]:
    """Per GPU model, the largest NVLink-connected set of GPUs one host of the fleet holds.

    ``{(vendor_id, product_id): GPUs}``, ids lower-cased as Nova's PCI pools hold them.
    Counted on each host's whole board (:attr:`SimHost.base`: every passthrough GPU,
    whatever holds it now), so it is measured once per fleet, not per event: a set of
    GPUs of one model that are pairwise joined by NVLink (NVSwitch included), the
    cliques of :meth:`cortex.rules.gpu_sets.GpuMap.clique_sizes`. Hosts without
    passthrough GPUs (vGPU hosts) and GPUs that cannot be passed through (MIG, vGPU
    parents) are left out. A model no host links is absent (or 1).
    """
    reach: dict[tuple[str, str], int] = {}
    for host in cloud.hosts.values():
        if not host.passthrough_gpus():
            continue
        topology = host.base
        gpus = gpu_map(topology)
        models: dict[tuple[str, str], list[str]] = {}
        for gpu in topology.gpus:
            if gpu.passthrough and gpu.healthy:
                model = (gpu.vendor_id.lower(), (gpu.device_id or "").lower())
                models.setdefault(model, []).append(gpu.pci_address)
        for model, addresses in models.items():
            size = max(gpus.clique_sizes(gpus.mask(addresses), "nvlink"), default=0)
            reach[model] = max(reach.get(model, 0), size)
    return reach


def nvlink_reachable(reach: Mapping[tuple[str, str], int], products: Sequence[str],
                     k: int, vendor: str = VENDOR_NVIDIA) -> bool:
    """Whether the fleet holds k NVLink-connected GPUs of a model a request accepts.

    ``reach``: :func:`nvlink_reach`; ``products``: the PCI product ids the request
    accepts (empty: any GPU of ``vendor``, as the simulated request's spec asks).
    """
    wanted = {p.lower() for p in products}
    vendor = vendor.lower()
    return any(size >= k for (v, product), size in reach.items()
               if v == vendor and (not wanted or product in wanted))

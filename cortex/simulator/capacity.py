"""Placeable instances of a shape: how many more fit in a zone, asked of the pipelines.

Not a division of free totals (28 free H100s may hold no free 8-GPU board): instances
of the shape are placed one after the other through the pipeline the choice rules give
it, as the commitments are (:mod:`cortex.simulator.commitments`), each as the body Nova
would send with every host of the zone a candidate, as a simulation that promises and
records nothing; every instance placed counts as used for the next (its request's
resources and the GPUs nova-compute would hand it there:
:func:`cortex.scheduler.promise.predicted_gpus`), until none finds a host.

The hosts offered are those Placement would offer (:func:`allocation_candidates`: an
inventory of every class the instance asks, with room for it), as Nova asks Cortex about
Placement's candidates alone. What stops the next instance (``limited_by``) is judged
over every host of the zone once no host takes one more: ``placement`` when Placement
offers none, else the cause of the pipeline's empty answer
(:func:`cortex.scheduler.refusals.refusal_cause`: the step that removed the last hosts,
``commitments`` where other projects' committed room is what fills them).

Two fleets are asked:

- **now**: the knowledge view with the in-flight reservations, other projects'
  committed room (the shape's ``project_id``'s own room is its to use) and every step
  of the pipeline, the failover room (``filter_failover_room``) among them;
- **empty**: the same hosts with no instance, no usage, no reservation and no
  commitment (:func:`empty_view`); disabled and down hosts stay refused.

Placing one instance per call would take a pipeline run per instance (80,000 runs for
one-GPU VMs on 10,000 boards). The pipelines' filters judge each host on its own state
(the failover room is chosen from the synced view, which the holds do not change), so an
instance placed on one host changes the answer for that host alone, and the hosts a
call keeps can each take one more at once: each round is one call over the hosts still
open, and every host it keeps gets one instance. The per-host counts, and so the total,
are those of placing them one by one (``tests/unit/test_capacity.py`` checks it against
that count). Alike hosts take alike numbers, so one host of each group of like hosts is
asked (:func:`like_hosts`). ``limit`` bounds the instances counted; a count that reached it is
``complete: False``, the last round's instances taken in the zone's host order. The
weighers do not run: where an instance goes among the hosts that take it changes no
count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from cortex.ids import new_uuid
from cortex.knowledge.commitments import counted_holds
from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.knowledge.topology import state_id
from cortex.knowledge.view import HostState, KnowledgeView
from cortex.pipeline.choice import PipelineNotChosen, choose_pipeline
from cortex.pipeline.config import PipelineSet
from cortex.plugins.filters.failover_room import FailoverRoomFilter
from cortex.request.nova import NovaRequest
from cortex.scheduler.promise import predicted_gpus
from cortex.scheduler.refusals import Refusal, refusal_cause
from cortex.scheduler.service import SchedulerService, SchedulingFailed, simulation

VENDOR_NVIDIA = "10de"
#: Bounds of a shape's values (where it enters: the API, the CLI, a synced flavor).
MAX_VCPUS = 4096
MAX_MEMORY_MB = 64 * 1024 * 1024
MAX_GPUS = 64
MAX_NUMA_NODES = 16
MAX_PRODUCTS = 16
MAX_LIMIT = 100_000
DEFAULT_LIMIT = 10_000
_PRODUCT = re.compile(r"^[0-9a-fA-F]{4}$")
#: Nova's ``hw:mem_page_size`` values: small, large, any, or a size (KiB unless a unit).
_PAGE_SIZE = re.compile(r"^(small|large|any|[0-9]{1,10}([KMG]|[KMG]B|[KMG]iB)?)$")
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,255}$")
#: The cause when Placement would offer no host for the next instance.
PLACEMENT = "placement"


class ShapeInvalid(ValueError):
    """A shape outside its bounds (an API 400, exit status 2); the message says which."""


@dataclass(frozen=True)
class Shape:
    """What one instance asks: ``vcpus``, ``memory_mb`` (MiB), ``gpus`` passed through.

    ``products``: PCI product ids (4 hex digits) a GPU may be (any of; empty: any
    NVIDIA GPU); ``numa_nodes``: guest NUMA cells (None: two from 8 GPUs, one with
    fewer, none without GPUs: the commitments' choice); ``mem_page_size``: Nova's
    ``hw:mem_page_size``; ``project_id``: asked as that project (tenant isolation,
    allowed projects; its own committed room is its to use). A GPU shape asks dedicated
    CPUs (``hw:cpu_policy``). ``flavor``: the synced Nova flavor's name, whose
    ``extra_specs`` (``pci_passthrough:alias`` resolved by the ``[gpu]`` aliases) are
    sent as they are instead. Raises ShapeInvalid for a value outside its bounds.
    """

    vcpus: int
    memory_mb: int
    gpus: int = 0
    products: tuple[str, ...] = ()
    numa_nodes: int | None = None
    mem_page_size: str | None = None
    project_id: str | None = None
    flavor: str | None = None
    extra_specs: Mapping[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        """Refuse a value outside its bounds."""
        _bounded("vcpus", self.vcpus, 1, MAX_VCPUS)
        _bounded("memory_mb", self.memory_mb, 1, MAX_MEMORY_MB)
        _bounded("gpus", self.gpus, 0, MAX_GPUS)
        if len(self.products) > MAX_PRODUCTS or not all(
                isinstance(p, str) and _PRODUCT.match(p) for p in self.products):
            raise ShapeInvalid(f"products must be at most {MAX_PRODUCTS} PCI product ids "
                               "of 4 hex digits")
        if self.numa_nodes is not None:
            _bounded("numa_nodes", self.numa_nodes, 1, MAX_NUMA_NODES)
            if self.memory_mb % self.numa_nodes or self.vcpus % self.numa_nodes:
                raise ShapeInvalid("vcpus and memory_mb must divide evenly by numa_nodes "
                                   "(as Nova requires without hw:numa_cpus/mem.N)")
        if self.mem_page_size is not None and not _PAGE_SIZE.match(self.mem_page_size):
            raise ShapeInvalid("mem_page_size must be small, large, any or a size "
                               "such as 2MB or 1GB")
        if self.project_id is not None and not _NAME.match(self.project_id):
            raise ShapeInvalid("project_id must be 1 to 255 letters, digits, '.', ':', '_' "
                               "or '-'")
        if self.flavor is not None and not 1 <= len(self.flavor) <= 255:
            raise ShapeInvalid("flavor must be 1 to 255 characters")

    @property
    def cells(self) -> int:
        """Guest NUMA cells asked (0: none)."""
        if self.numa_nodes is not None:
            return self.numa_nodes
        return (2 if self.gpus >= 8 else 1) if self.gpus else 0

    def specs(self) -> dict[str, str]:
        """The flavor's extra specs: the synced flavor's, or those the shape implies."""
        if self.extra_specs is not None:
            return dict(self.extra_specs)
        extra: dict[str, str] = {}
        if self.gpus:
            extra["hw:cpu_policy"] = "dedicated"
        if self.cells:
            extra["hw:numa_nodes"] = str(self.cells)
        if self.mem_page_size:
            extra["hw:mem_page_size"] = self.mem_page_size
        return extra


def _bounded(name: str, value: Any, low: int, high: int) -> None:
    """Refuse ``value`` unless an integer in ``[low, high]``."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ShapeInvalid(f"{name} must be an integer from {low} to {high}")


def flavor_shape(flavor: Mapping[str, Any], project_id: str | None = None) -> Shape:
    """The Shape of a synced Nova flavor row (``name``, ``vcpus``, ``ram``, ``extra_specs``).

    Its GPUs are the ``pci_passthrough:alias`` counts (``alias:count,...``); the alias
    decides which devices, resolved as for Nova's own calls.
    """
    specs = {str(k): str(v) for k, v in (flavor.get("extra_specs") or {}).items()}
    return Shape(int(flavor["vcpus"]), int(flavor["ram"]), gpus=flavor_gpus(specs),
                 project_id=project_id, flavor=str(flavor["name"]),
                 extra_specs=MappingProxyType(specs))


def flavor_gpus(specs: Mapping[str, str]) -> int:
    """Devices a flavor's ``pci_passthrough:alias`` asks for (``a:2,b:1`` -> 3); 0 if none."""
    total = 0
    for item in (specs.get("pci_passthrough:alias") or "").split(","):
        name, _, count = item.strip().partition(":")
        if name:
            total += int(count) if count.strip().isdigit() else 1
    return total


def _alias_requests(specs: Mapping[str, str], devices: Any) -> list[dict[str, Any]]:
    """The PCI requests of a flavor's aliases when the catalog lacks one of them ([] if none).

    Known aliases keep their specs; an unknown one asks for that many NVIDIA GPUs of any
    model (what a GPU flavor's alias names), with the flavor's
    ``hw:pci_numa_affinity_policy`` (default legacy).
    """
    aliases = getattr(devices, "aliases", None) or {}
    items = [i.strip().partition(":") for i in (specs.get("pci_passthrough:alias") or "")
             .split(",") if i.strip()]
    if not items or all(name in aliases for name, _, _ in items):
        return []
    policy = specs.get("hw:pci_numa_affinity_policy")
    requests = []
    for name, _, amount in items:
        alias = aliases.get(name)
        requests.append({"nova_object.data": {
            "count": int(amount) if amount.strip().isdigit() else 1,
            "spec": [dict(s) for s in alias.specs] if alias else [{"vendor_id": VENDOR_NVIDIA}],
            "alias_name": name, "request_id": None,
            "numa_policy": policy or (alias.numa_policy if alias else "legacy")}})
    return requests


@dataclass(frozen=True)
class Placeable:
    """How many instances of a shape fit, and where.

    ``count``: instances placed; ``hosts``: ``{host: instances}`` (hosts with at least
    one); ``limited_by``: why the next one found no host (None when ``limit`` stopped
    the count: ``complete`` False); ``pipeline``: the pipeline that placed them.
    """

    count: int
    hosts: Mapping[str, int]
    limited_by: Refusal | None
    pipeline: str | None
    complete: bool = True


class _Fixed:
    """A knowledge source that always gives one view."""

    def __init__(self, view: KnowledgeView) -> None:
        self._view = view

    def view(self) -> KnowledgeView:
        """The view."""
        return self._view


def _empty_host(state: HostState) -> HostState:
    """``state`` with nothing on it: no usage, instances, migrations, used GPUs or pages."""
    nodes = {name: replace(node, inventories=MappingProxyType(
        {rc: replace(inv, used=0) for rc, inv in node.inventories.items()}))
        for name, node in state.nodes.items()}
    topology = state.topology
    if topology is not None:
        cells = tuple(replace(c, memory_usage=0, cpu_usage=0, pinned_cpus=frozenset(),
                              mempages=tuple(replace(p, used=0) for p in c.mempages))
                      for c in topology.cells)
        gpus = tuple(replace(g, in_use=False, in_use_source=None, vgpus_in_use=0,
                             instance_uuid=None, power_watts=None,
                             mig_instances=tuple(replace(m, in_use=False)
                                                 for m in g.mig_instances))
                     for g in topology.gpus)
        topology = replace(topology, cells=cells, gpus=gpus)
    return replace(state, nodes=MappingProxyType(nodes), instances=(), migrations=(),
                   features=MappingProxyType({}), topology=topology)


def empty_view(view: KnowledgeView) -> KnowledgeView:
    """``view``'s hosts with nothing on them, no commitments; built once per knowledge version.

    Hosts keep their inventories' totals, reserved amounts and ratios, their topology,
    aggregates, traits and service state (a disabled or down host stays refused).
    """
    def build(root: KnowledgeView) -> KnowledgeView:
        return KnowledgeView(
            version=root.version, loaded_at=root.loaded_at,
            hosts=MappingProxyType({n: _empty_host(s) for n, s in root.hosts.items()}),
            pools=root.pools, network=root.network,
            gpu_request_sizes=root.gpu_request_sizes)
    return view.root.derived(("capacity-empty-view",), build)


def zone_hosts(view: KnowledgeView, zone: str | None) -> list[str]:
    """The hosts of ``zone`` (None: every host), in the view's order."""
    return [name for name, state in view.hosts.items()
            if zone is None or state.availability_zone == zone]


def request_body(shape: Shape, hosts: Sequence[str], view: KnowledgeView,
                 name: str, devices: Any = None) -> dict[str, Any]:
    """The body Nova would send for one instance of ``shape`` with ``hosts`` as candidates.

    A flavor's ``pci_passthrough:alias`` becomes the PCI requests nova-api would have
    made of it (:func:`_alias_requests`) when ``devices`` (the ``[gpu]`` catalog) lacks
    one of its aliases.
    """
    cells = max(1, shape.cells)
    data: dict[str, Any] = {
        "flavor": {"nova_object.data": {
            "name": shape.flavor or f"capacity.{shape.vcpus}c{shape.gpus}g",
            "vcpus": shape.vcpus, "memory_mb": shape.memory_mb if shape.extra_specs
            is not None else math.ceil(shape.memory_mb / cells) * cells,
            "root_gb": 0, "ephemeral_gb": 0, "swap": 0, "extra_specs": shape.specs()}},
        "image": {"nova_object.data": {"properties": {"nova_object.data": {}}}},
        "instance_uuid": name, "num_instances": 1, "project_id": shape.project_id}
    if shape.gpus and shape.extra_specs is None:
        specs = [{"vendor_id": VENDOR_NVIDIA, "product_id": p.lower()}
                 for p in shape.products] or [{"vendor_id": VENDOR_NVIDIA}]
        data["pci_requests"] = {"nova_object.data": {"requests": [{"nova_object.data": {
            "count": shape.gpus, "spec": specs, "alias_name": "gpu",
            "numa_policy": "legacy", "request_id": None}}]}}
    elif shape.extra_specs is not None:
        requests = _alias_requests(shape.extra_specs, devices)
        if requests:
            data["pci_requests"] = {"nova_object.data": {"requests": requests}}
    entries = [{"host": h, "hypervisor_hostname": next(iter(view.hosts[h].nodes), h)}
               for h in hosts]
    return {"spec": {"nova_object.name": "RequestSpec", "nova_object.data": data},
            "hosts": entries, "weights": dict.fromkeys(hosts, 0.0),
            "context": {"request_id": f"req-{name}", "project_id": shape.project_id}}


def count(scheduler: SchedulerService, view: KnowledgeView, shape: Shape, zone: str | None,
          now: datetime, reservations: Sequence[Reservation] = (),
          limit: int = DEFAULT_LIMIT, devices: Any = None,
          step_options: Mapping[str, Mapping[str, Any]] | None = None) -> Placeable:
    """Instances of ``shape`` placeable in ``zone`` of ``view`` (see the module).

    ``scheduler``: its pipelines and settings decide (its knowledge, reservation store,
    recorder and metrics are not used: ``view`` is asked, ``reservations`` are the
    in-flight ones counted as used, nothing is promised, recorded or counted);
    ``devices``: the ``[gpu]`` catalog a flavor's aliases resolve with;
    ``step_options``: a simulation's step options laid over the pipeline's. Raises
    SchedulingFailed when a call cannot be answered (400: no pipeline fits; 503).
    """
    service = SchedulerService(
        filters_only(scheduler.pipelines), _Fixed(view),
        replace(scheduler.settings, request_time_budget=0.0, reservation_ttl=0.0))
    until = now + timedelta(days=1)
    every = zone_hosts(view, zone)
    groups = like_hosts(view, every, _apart(
        service, view, shape, zone, now, reservations, step_options, devices))
    open_hosts = list(groups)
    placed: list[Reservation] = []
    counts: dict[str, int] = {}
    total, rounds, pipeline = 0, 0, None
    while True:
        name = f"capacity-{rounds}"
        held = (*reservations, *placed)
        offered, _ = allocation_candidates(
            view, held, now, open_hosts, _resources(shape, view, open_hosts, devices))
        decision = None
        if offered:
            request = NovaRequest.from_body(request_body(shape, offered, view, name, devices),
                                            devices)
            decision = _decide(service, request, now, held, step_options)
            pipeline = decision.pipeline
        taken = [h for h in decision.result or () if h in groups] if decision else []
        if not taken:
            found, total = _expand(every, groups, counts, limit)
            return Placeable(total, MappingProxyType(found), _stopped(
                service, view, shape, list(groups), now, held, step_options, devices, name),
                pipeline)
        overlaid = with_reservations(view, held, now)
        for host in taken:
            placed.append(Reservation(new_uuid(), host, None, None,
                                      MappingProxyType(dict(request.resources)),
                                      predicted_gpus(overlaid.hosts[host], request), now, until))
            counts[host] = counts.get(host, 0) + 1
            total += len(groups[host])
        rounds += 1
        if total >= limit:
            found, total = _expand(every, groups, counts, limit)
            return Placeable(total, MappingProxyType(found), None, pipeline, complete=False)
        order = set(taken)
        open_hosts = [h for h in open_hosts if h in order]


def _signature(state: HostState) -> tuple[Any, ...]:
    """What the filters can read of a host besides its name: equal for like hosts.

    The topology's state number (:func:`cortex.knowledge.topology.state_id`: cells,
    GPUs but their uuids and indices, the link map), the nodes without their names and
    uuids, the zone, service state, aggregates, traits, CPU flags, allowed projects,
    failed builds, labels, and the instances' projects and states.
    """
    return (state_id(state.topology) if state.topology is not None else None,
            tuple(repr(replace(n, node="", uuid="")) for n in state.all_nodes),
            state.availability_zone, state.enabled, state.up, state.disabled_reason,
            repr(state.aggregates), state.traits, state.cpu_features,
            state.allowed_projects, state.failed_builds, repr(sorted(state.labels.items())),
            tuple(sorted((i.project_id or "", i.vm_state or "", i.task_state or "")
                         for i in state.instances)))


def like_hosts(view: KnowledgeView, hosts: Sequence[str],
               apart: set[str]) -> dict[str, list[str]]:
    """``{representative: [hosts]}``: ``hosts`` grouped by :func:`_signature`, in order.

    A pipeline's filters answer alike hosts alike, and so place as many instances on
    each: a count asks one host of each group. The hosts in ``apart`` (named by
    something outside their own state: a reservation or commitment on them, the
    failover room, a step's options, an in-progress migration) are each a group of
    their own.
    """
    groups: dict[str, list[str]] = {}
    first: dict[Any, str] = {}
    for host in hosts:
        key = ("host", host) if host in apart else _signature(view.hosts[host])
        groups.setdefault(first.setdefault(key, host), []).append(host)
    return groups


def _apart(service: SchedulerService, view: KnowledgeView, shape: Shape, zone: str | None,
           now: datetime, reservations: Sequence[Reservation],
           step_options: Mapping[str, Mapping[str, Any]] | None,
           devices: Any) -> set[str]:
    """The hosts of ``zone`` that :func:`like_hosts` must not group (see there)."""
    hosts = zone_hosts(view, zone)
    apart = {r.host for r in reservations}
    apart |= {r.host for r in counted_holds(view.commitments, view.hosts, shape.project_id,
                                            now)}
    apart |= {h for h in hosts if view.hosts[h].migrations}
    request = NovaRequest.from_body(request_body(shape, hosts, view, "capacity", devices),
                                    devices)
    try:
        pipeline = choose_pipeline(service.pipelines, request, None, step_options,
                                   None, view).pipeline
    except PipelineNotChosen:
        return set(hosts)  # the count's first call answers 400
    for step in pipeline.filters:
        if isinstance(step.plugin, FailoverRoomFilter):
            apart |= set(step.plugin.bind(request, view).kept)
        named = repr(step.plugin.options)
        apart |= {h for h in hosts if repr(h) in named}
    return apart


def _expand(hosts: Sequence[str], groups: Mapping[str, list[str]],
            counts: Mapping[str, int], limit: int) -> tuple[dict[str, int], int]:
    """``({host: instances}, total)`` of ``hosts`` from their representatives' counts.

    Past ``limit`` the last hosts (in the order of ``hosts``) give theirs back.
    """
    of = {h: rep for rep, members in groups.items() for h in members}
    found = {h: counts[of[h]] for h in hosts if counts.get(of[h])}
    total = sum(found.values())
    for host in reversed(list(found)):
        if total <= limit:
            break
        cut = min(found[host], total - limit)
        found[host] -= cut
        total -= cut
        if not found[host]:
            del found[host]
    return found, total


_FILTERS_ONLY: dict[int, tuple[PipelineSet, PipelineSet]] = {}


def filters_only(pipelines: PipelineSet) -> PipelineSet:
    """``pipelines`` without their weighers: a count asks only which hosts pass.

    Kept per PipelineSet object (a worker has one), so that the steps' kept answers
    (:mod:`cortex.pipeline.memo`) are shared by every count of a knowledge version.
    """
    found = _FILTERS_ONLY.get(id(pipelines))
    if found is None or found[0] is not pipelines:
        found = _FILTERS_ONLY[id(pipelines)] = (pipelines, replace(pipelines, pipelines={
            name: replace(p, weighers=()) for name, p in pipelines.pipelines.items()}))
    return found[1]


def placement_refusal(state: HostState, resources: Mapping[str, int]) -> str | None:
    """Why Placement would offer no allocation of ``resources`` on the host (None: it would).

    Placement's allocation candidates (``placement/objects/allocation_candidate.py``):
    a node with an inventory of each class whose capacity holds the amount
    (:meth:`cortex.knowledge.view.Inventory.refusal`). The pipeline's own capacity
    filter re-checks only its ``resource_classes``; Nova asks Cortex about Placement's
    candidates alone, so the hosts offered here are those.
    """
    for rc, amount in resources.items():
        if not amount:
            continue
        inventories = [n.inventories[rc] for n in state.all_nodes if rc in n.inventories]
        if not inventories:
            return f"no {rc} inventory"
        reasons = [i.refusal(amount) for i in inventories]
        if all(reasons):
            return f"{rc}: {reasons[0]}"
    return None


def allocation_candidates(view: KnowledgeView, held: Sequence[Reservation], now: datetime,
                          hosts: Sequence[str], resources: Mapping[str, int]
                          ) -> tuple[list[str], dict[str, str]]:
    """``(offered, refused)``: ``hosts`` Placement offers with ``held`` counted, and why not."""
    overlaid = with_reservations(view, held, now)
    offered, refused = [], {}
    for host in hosts:
        reason = placement_refusal(overlaid.hosts[host], resources)
        if reason is None:
            offered.append(host)
        else:
            refused[host] = reason
    return offered, refused


def _resources(shape: Shape, view: KnowledgeView, hosts: Sequence[str],
               devices: Any) -> Mapping[str, int]:
    """The resources one instance of ``shape`` asks of Placement."""
    return NovaRequest.from_body(request_body(shape, hosts[:1], view, "capacity",
                                              devices), devices).resources


def _stopped(service: SchedulerService, view: KnowledgeView, shape: Shape,
             every: list[str], now: datetime, held: tuple[Reservation, ...],
             step_options: Mapping[str, Mapping[str, Any]] | None, devices: Any,
             name: str) -> Refusal:
    """What stops the next instance, judged over ``every`` host (of each like group, one).

    ``placement`` when Placement offers none of them; else the cause of the pipeline's
    empty answer over those it offers (:func:`cortex.scheduler.refusals.refusal_cause`),
    asked again with the instances placed and the in-flight reservations counted: a
    host that passes there was refused for others' committed room.
    """
    offered, refused = allocation_candidates(view, held, now, every,
                                             _resources(shape, view, every, devices))
    if not offered:  # a reason of a host with the inventory, where one has it
        reasons = [r for r in refused.values() if not r.startswith("no ")] or list(
            refused.values())
        return Refusal(PLACEMENT, reasons[-1] if reasons else None)
    request = NovaRequest.from_body(request_body(shape, offered, view, name, devices),
                                    devices)
    decision = _decide(service, request, now, held, step_options)
    return refusal_cause(decision.steps, len(decision.hosts),
                         _pipeline(service, decision.pipeline), request,
                         with_reservations(view, held, now), now)


def _decide(service: SchedulerService, request: NovaRequest, now: datetime,
            holds: tuple[Reservation, ...],
            step_options: Mapping[str, Mapping[str, Any]] | None) -> Any:
    """The simulated decision of ``request`` with ``holds`` counted as used."""
    try:
        return service.schedule(request, simulation(now=now, holds=holds,
                                                    step_options=step_options))
    except SchedulingFailed as exc:
        if exc.status == 503 or exc.decision.pipeline is None:
            raise
        return exc.decision


def _pipeline(service: SchedulerService, name: str | None) -> Any:
    """The pipeline named ``name`` of ``service`` (None when none ran)."""
    return service.pipelines.pipelines.get(name or "")

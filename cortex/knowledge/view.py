"""The immutable knowledge view that plugins read: hosts, nodes, inventories, pools.

A view is built from the database once per knowledge version and shared by every
request a worker serves until the version moves; nothing in it is ever mutated.

Facts that the OpenStack and Prometheus syncers fill (instances per host, in-progress
migrations, Prometheus features, failed builds, CPU features, allowed projects) are
optional: they default to empty, so a view built from a fleet file without them is
valid and the plugins that read them simply have nothing to weigh.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, TypeVar

from cortex.knowledge.network import NetworkTopology
from cortex.knowledge.topology import HostTopology

EMPTY: Mapping[str, Any] = MappingProxyType({})
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Inventory:
    """Placement inventory and usage of one resource class on one provider.

    Capacity rule (Placement, ``placement/objects/allocation_candidate.py``):
    ``capacity = (total - reserved) * allocation_ratio``; ``n`` units fit when
    ``used + n <= capacity``, ``min_unit <= n <= max_unit`` and ``n % step_size == 0``.
    """

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = 0
    step_size: int = 1
    allocation_ratio: float = 1.0
    used: int = 0

    @property
    def capacity(self) -> float:
        """Units that may be allocated in all: ``(total - reserved) * allocation_ratio``."""
        return (self.total - self.reserved) * self.allocation_ratio

    @property
    def free(self) -> float:
        """Units still allocatable: ``capacity - used`` (negative when overcommitted)."""
        return self.capacity - self.used

    def refusal(self, amount: int) -> str | None:
        """None when ``amount`` units fit by Placement's rules, else the broken rule."""
        if amount < self.min_unit:
            return f"{amount} < min_unit {self.min_unit}"
        if self.max_unit and amount > self.max_unit:
            return f"{amount} > max_unit {self.max_unit}"
        if self.step_size > 1 and amount % self.step_size:
            return f"{amount} not a multiple of step_size {self.step_size}"
        if self.used + amount > self.capacity:
            return f"used {self.used} + {amount} > capacity {self.capacity:g}"
        return None


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A Nova host aggregate with its metadata."""

    uuid: str
    name: str
    availability_zone: str | None
    metadata: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class InstanceSummary:
    """An instance on a host, as the syncers summarise it (Nova's servers API, Prometheus).

    ``vm_state``/``task_state`` are Nova's (``building``, ``resize_migrating``, ...);
    ``cpu_busy`` is the share of the instance's own vCPU time spent busy over the
    syncer's window (0..1, from Prometheus; 0 when unknown).
    """

    uuid: str
    project_id: str | None = None
    vm_state: str | None = None
    task_state: str | None = None
    cpu_busy: float = 0.0


@dataclass(frozen=True, slots=True)
class MigrationSummary:
    """An in-progress migration into or out of a host (Nova's os-migrations).

    ``resources`` (resource class -> amount) is the claim the migration holds on this
    host that the node's Placement ``used`` does NOT include yet; the syncer leaves out
    migrations whose allocations Placement already shows, so counting them never counts
    twice. ``status`` is Nova's migration status (``queued``, ``preparing``, ``running``...).
    """

    uuid: str
    instance_uuid: str | None
    source_host: str | None
    dest_host: str | None
    status: str
    resources: Mapping[str, int] = field(default_factory=lambda: EMPTY)


@dataclass(frozen=True, slots=True)
class NodeState:
    """One compute node (a Placement root provider) of a host.

    ``allocation_ratios``: ``(cpu, ram)``, the VCPU and MEMORY_MB inventories' allocation
    ratios (1.0 where there is none): the compute node's ratios, which Nova's
    NUMATopologyFilter applies (:func:`cortex.rules.measures.allocation_ratios`).

    Hypervisor facts as Nova's hypervisor API (or cortex-agent) reports them, read by
    Nova's ComputeCapabilitiesFilter and ImagePropertiesFilter: ``cpu_info`` (``arch``,
    ``vendor``, ``model``, ``topology`` ``{sockets, cores, threads}``, ``features`` in the
    reported order, ``maxphysaddr``; empty when unknown), ``host_ip``, and
    ``supported_instances`` (``(arch, hv_type, vm_mode)`` triples; None when not
    reported, then :func:`cortex.rules.image_properties.supported_instances` derives them).
    """

    node: str
    uuid: str
    hypervisor_type: str | None
    hypervisor_version: int | None
    cpu_arch: str | None
    traits: frozenset[str]
    inventories: Mapping[str, Inventory]
    cpu_info: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    host_ip: str | None = None
    supported_instances: tuple[tuple[str, str, str], ...] | None = None
    allocation_ratios: tuple[float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cpu, ram = self.inventories.get("VCPU"), self.inventories.get("MEMORY_MB")
        object.__setattr__(self, "allocation_ratios", (
            cpu.allocation_ratio if cpu else 1.0, ram.allocation_ratio if ram else 1.0))


@dataclass(frozen=True, slots=True)
class HostState:
    """A compute host (one nova-compute service) and what Cortex knows of it.

    ``enabled`` is the service status an operator sets, ``up`` its liveness;
    ``nodes`` maps ``hypervisor_hostname`` to NodeState (one for KVM, several for
    Ironic or VMware clusters). ``traits`` is the union of the nodes' traits.

    Filled by the syncers, empty when unknown: ``features`` (Prometheus features by
    dotted name, e.g. ``cpu.busy``, ``cpu.steal``, ``cpu.contention``, as fractions
    0..1), ``cpu_features`` (the host CPU's flags, libvirt's ``cpu_info.features``),
    ``instances`` (InstanceSummary per instance on the host), ``migrations``
    (MigrationSummary, see there), ``failed_builds`` (Nova's count of recent build
    failures on the host, reset by a success) and ``allowed_projects`` (when not
    empty, the only projects the host may serve). ``topology`` is what the host's
    cortex-agent reported (None: no report); ``labels`` a Kubernetes node's labels, as
    the extender last saw them (empty for Nova's hosts).
    """

    host: str
    availability_zone: str | None
    enabled: bool
    up: bool
    disabled_reason: str | None
    aggregates: tuple[Aggregate, ...]
    nodes: Mapping[str, NodeState]
    traits: frozenset[str]
    features: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    cpu_features: frozenset[str] = frozenset()
    instances: tuple[InstanceSummary, ...] = ()
    migrations: tuple[MigrationSummary, ...] = ()
    failed_builds: int = 0
    allowed_projects: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    topology: HostTopology | None = None

    all_nodes: tuple[NodeState, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Precompute the node tuple: plugins ask for it for every host of every request."""
        object.__setattr__(self, "all_nodes", tuple(self.nodes.values()))

    def nodes_named(self, names: tuple[str, ...]) -> tuple[NodeState, ...]:
        """The nodes the caller named (all nodes when it named none or none is known)."""
        if len(self.all_nodes) <= 1 or not names:
            return self.all_nodes
        chosen = tuple(self.nodes[n] for n in names if n in self.nodes)
        return chosen or self.all_nodes


@dataclass(frozen=True, slots=True)
class StoragePoolState:
    """A Cinder or Manila pool (``host@backend#pool``); capacities in GiB.

    Filled by the syncers, empty when unknown: ``features`` (Prometheus features by
    dotted name, e.g. ``pool.utilization`` or the storage node's ``cpu.busy``, 0..1) and
    ``resource_count`` (volumes or shares on the pool, Cinder's ``VolumeNumberWeigher``
    count). ``availability_zone`` is the zone's name; ``availability_zone_id`` its UUID
    (Manila's ``availability_zones.id``, what Manila's requests name), None where it is
    not known (Cinder's pools, whose zones have names only).
    """

    name: str
    availability_zone: str | None
    total_capacity_gb: float
    free_capacity_gb: float
    allocated_capacity_gb: float
    provisioned_capacity_gb: float
    reserved_percentage: float
    max_over_subscription_ratio: float
    thin_provisioning_support: bool
    thick_provisioning_support: bool
    capabilities: Mapping[str, Any]
    features: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    resource_count: int = 0
    availability_zone_id: str | None = None


@dataclass(frozen=True, slots=True)
class KnowledgeView:
    """Everything a worker knows at one knowledge ``version``.

    ``hosts`` maps a Nova host name to its HostState; ``pools`` maps a service
    (``cinder``, ``manila``) to ``{pool name: StoragePoolState}``; ``network`` is the
    leaf/spine fabric (:mod:`cortex.knowledge.network`). ``reservations`` is empty in
    the shared view; a request's view with the in-flight reservations laid over it
    (:func:`cortex.knowledge.reservations.with_reservations`) lists the unexpired ones,
    and ``overlaid`` names the hosts whose state there is not the synced view's
    (``root``'s). ``commitments`` are the committed reservations of this version
    (:class:`cortex.knowledge.commitments.Commitment`, with their holds).
    ``gpu_request_sizes``: ``{whole GPUs per instance: creates}`` the decision log
    recorded over the last :data:`cortex.knowledge.loader.REQUEST_SIZES_DAYS` days, placed
    and refused (the workload's own size distribution, for
    ``weigher_gpu_fragmentation``'s ``sizes_from: demand``). ``gpu_model_demand``:
    ``{GPU model: whole GPUs}`` the same creates asked over those days, those that named
    their model counted against it, the others under ``any``
    (:func:`cortex.knowledge.model_demand.model_pressure`). ``skipped_rows``: ``{table:
    rows}`` the load could not read and left out (:class:`cortex.knowledge.loader.Skips`).
    """

    version: int
    loaded_at: datetime
    hosts: Mapping[str, HostState]
    pools: Mapping[str, Mapping[str, StoragePoolState]] = field(
        default_factory=lambda: MappingProxyType({}))
    network: NetworkTopology = field(default_factory=NetworkTopology)
    reservations: tuple[Any, ...] = ()
    commitments: tuple[Any, ...] = ()
    gpu_request_sizes: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    gpu_model_demand: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    skipped_rows: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    base: KnowledgeView | None = field(default=None, repr=False, compare=False)
    overlaid: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def per_host(self, key: Hashable) -> dict:
        """A dict of per-host facts under ``key``, shared with the view this one overlays.

        An overlay (``base`` set: the view with in-flight reservations counted) replaces
        only the states of the hosts it changes, so facts of a host may be shared across
        the overlays of one knowledge version if each entry is stored as ``(host state,
        value)`` and read only when the state is the very same object (``is``). Every
        reader must check that; the dict lives as long as the root view.
        """
        return self.root.derived(("per-host", key), lambda _: {})

    @property
    def root(self) -> KnowledgeView:
        """The synced view under this one's overlays (``base``, repeatedly); itself if none.

        Facts derived from the root (``root.derived(...)``) are built once per knowledge
        version; a reader must then treat the hosts whose state here is not the root's
        (``view.hosts[h] is not view.root.hosts[h]``) as changed by the overlay.
        """
        root = self
        while root.base is not None:
            root = root.base
        return root

    def derived(self, key: Hashable, build: Callable[[KnowledgeView], T]) -> T:
        """The fact ``build(view)`` under ``key``, computed once per view and then shared.

        For facts the plugins derive from the view and would otherwise recompute for
        every request (per-host tables, lookups by host name): they are as immutable as
        the view and go away with it when the knowledge version moves. ``key`` names the
        fact and every input besides the view (e.g. ``(plugin name, repr(options))``).
        Two threads asking at once may both build it; the last one is kept, and both
        are equal. A ``build`` that raises stores nothing.
        """
        try:
            return self._derived[key]
        except KeyError:
            value = self._derived[key] = build(self)
            return value

    def states_for(self, service: str) -> Mapping[str, Any]:
        """The states a service's candidates are looked up in (hosts or that service's pools).

        Kubernetes nodes are hosts too: those whose agent reports but Nova does not know.
        """
        if service in ("nova", "kubernetes"):
            return self.hosts
        return self.pools.get(service, MappingProxyType({}))

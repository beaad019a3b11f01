"""The immutable knowledge view that plugins read: hosts, nodes, inventories, pools.

A view is built from the database once per knowledge version and shared by every
request a worker serves until the version moves; nothing in it is ever mutated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from cortex.knowledge.topology import HostTopology


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
class NodeState:
    """One compute node (a Placement root provider) of a host."""

    node: str
    uuid: str
    hypervisor_type: str | None
    hypervisor_version: int | None
    cpu_arch: str | None
    traits: frozenset[str]
    inventories: Mapping[str, Inventory]


@dataclass(frozen=True, slots=True)
class HostState:
    """A compute host (one nova-compute service) and what Cortex knows of it.

    ``enabled`` is the service status an operator sets, ``up`` its liveness;
    ``nodes`` maps ``hypervisor_hostname`` to NodeState (one for KVM, several for
    Ironic or VMware clusters). ``traits`` is the union of the nodes' traits.
    ``topology`` is what the host's cortex-agent reported (None: no report).
    """

    host: str
    availability_zone: str | None
    enabled: bool
    up: bool
    disabled_reason: str | None
    aggregates: tuple[Aggregate, ...]
    nodes: Mapping[str, NodeState]
    traits: frozenset[str]
    topology: HostTopology | None = None

    def nodes_named(self, names: tuple[str, ...]) -> tuple[NodeState, ...]:
        """The nodes the caller named (all nodes when it named none or none is known)."""
        chosen = tuple(self.nodes[n] for n in names if n in self.nodes)
        return chosen or tuple(self.nodes.values())


@dataclass(frozen=True, slots=True)
class StoragePoolState:
    """A Cinder or Manila pool (``host@backend#pool``); capacities in GiB."""

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


@dataclass(frozen=True, slots=True)
class KnowledgeView:
    """Everything a worker knows at one knowledge ``version``.

    ``hosts`` maps a Nova host name to its HostState; ``pools`` maps a service
    (``cinder``, ``manila``) to ``{pool name: StoragePoolState}``.
    """

    version: int
    loaded_at: datetime
    hosts: Mapping[str, HostState]
    pools: Mapping[str, Mapping[str, StoragePoolState]] = field(
        default_factory=lambda: MappingProxyType({}))

    def states_for(self, service: str) -> Mapping[str, Any]:
        """The states a service's candidates are looked up in (hosts or that service's pools)."""
        if service == "nova":
            return self.hosts
        return self.pools.get(service, MappingProxyType({}))

"""Measures of a host shared by several plugins: free share, I/O ops, group members, bounds.

Each function reads the knowledge view's HostState/NodeState and the parsed request
only; the rule it implements and its source are in its docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Nova's io_workload (nova/compute/stats.py): instances building or in these task states.
IO_TASK_STATES = frozenset({
    "resize_migrating", "rebuilding", "resize_prep", "image_snapshot", "image_backup",
    "rescuing", "unshelving"})


def free_share(node: Any, resource_class: str, request: Any) -> float | None:
    """Share of ``resource_class``'s capacity left on ``node`` after placing ``request``.

    ``(capacity - used - requested) / capacity`` with Placement's capacity
    ``(total - reserved) * allocation_ratio``; may be negative when overcommitted.
    None when the node has no (or an empty) inventory of that class.
    """
    inventory = node.inventories.get(resource_class)
    if inventory is None or inventory.capacity <= 0:
        return None
    requested = request.resources.get(resource_class, 0)
    return (inventory.capacity - inventory.used - requested) / inventory.capacity


def nova_free(node: Any, resource_class: str) -> float | None:
    """What Nova's weighers call free on ``node``, from its Placement inventories; None: none.

    ``MEMORY_MB``: ``free_ram_mb``, the compute node's ``memory_mb - memory_mb_used``,
    i.e. ``total - reserved - used`` (RAMWeigher); ``DISK_GB``: ``free_disk_mb``,
    ``(total - reserved - used) * 1024`` (DiskWeigher); ``VCPU``: ``vcpus_total *
    cpu_allocation_ratio - vcpus_used`` (CPUWeigher, ``nova/scheduler/weights/cpu.py``).
    Nova's ``vcpus_total`` is the shared CPUs (the VCPU inventory's total; 0 on a host
    with dedicated CPUs only) and its ``vcpus_used`` the reserved host CPUs plus every
    guest's vCPUs, pinned ones included (the resource tracker counts each flavor's
    ``vcpus``, ``nova/compute/resource_tracker.py``): VCPU ``reserved + used`` plus PCPU
    ``used``. None for ``VCPU`` when the node has neither class. Before placing the
    request, as Nova weighs.
    """
    if resource_class == "VCPU":
        shared, dedicated = node.inventories.get("VCPU"), node.inventories.get("PCPU")
        if shared is None and dedicated is None:
            return None
        total = shared.total * shared.allocation_ratio if shared is not None else 0.0
        used = (shared.reserved + shared.used if shared is not None else 0) + (
            dedicated.used if dedicated is not None else 0)
        return float(total - used)
    inventory = node.inventories.get(resource_class)
    if inventory is None:
        return None
    free = inventory.total - inventory.reserved - inventory.used
    return float(free * 1024 if resource_class == "DISK_GB" else free)


def num_io_ops(host: Any) -> int:
    """Nova's ``num_io_ops``: instances on the host that are building or in an I/O task."""
    return sum(1 for i in host.instances
               if i.vm_state == "building" or i.task_state in IO_TASK_STATES)


def group_members_on_host(host: Any, group: Any) -> int:
    """Members of server ``group`` on ``host``, as Nova's affinity filters count them.

    Nova counts the host's instances that are group members
    (``nova/scheduler/filters/affinity_filter.py``); Cortex also trusts the group's
    ``hosts`` list that Nova sends (a member runs there), which covers hosts whose
    instance list the knowledge does not have yet: at least 1 for such a host.
    """
    members = set(group.members)
    count = sum(1 for i in host.instances if i.uuid in members)
    if not count and host.host in group.hosts:
        return 1
    return count


def bounded(value: float, lower: float, upper: float) -> float:
    """``value`` mapped linearly from ``[lower, upper]`` onto ``[0, 1]``, clamped.

    The reference implementation's activation for load features: nothing below
    ``lower``, full effect from ``upper`` on.
    """
    if upper <= lower:
        return 1.0 if value >= upper else 0.0
    return min(1.0, max(0.0, (value - lower) / (upper - lower)))


def aggregate_metadata(host: Any) -> dict[str, set[str]]:
    """``{key: values}`` over the host's aggregates, comma-separated values split.

    Nova's ``aggregate_metadata_get_by_host`` (``nova/scheduler/utils.py``).
    """
    metadata: dict[str, set[str]] = {}
    for aggregate in host.aggregates:
        for key, value in aggregate.metadata.items():
            metadata.setdefault(key, set()).update(
                v.strip() for v in str(value).split(","))
    return metadata


def feature(features: Mapping[str, float], name: str, default: float = 0.0) -> float:
    """A Prometheus feature by name, ``default`` when the syncer has none."""
    return float(features.get(name, default))


def source_host(request: Any) -> str | None:
    """The ``source_host`` scheduler hint SAP's Nova sends with moves (first value), if any."""
    values = request.scheduler_hints.get("source_host") or ()
    return values[0] if values else None


def allocation_ratios(host: Any, candidate: Any) -> tuple[float, float]:
    """``(cpu_allocation_ratio, ram_allocation_ratio)`` of the named node's inventories.

    Nova's NUMATopologyFilter takes the compute node's ratios, which are the VCPU and
    MEMORY_MB inventories' allocation ratios in Placement; 1.0 where there is none.
    """
    nodes = host.nodes_named(candidate.nodes)
    return nodes[0].allocation_ratios if nodes else (1.0, 1.0)

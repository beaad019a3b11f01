"""N+1 failover room: which hosts to keep free to evacuate any one failed host.

Per group of like hosts (``gpu_model``: the availability zone and the NVIDIA product of
the host's GPUs; or ``availability_zone``), the enabled, up hosts with the most free
room (free GPUs, then free memory; ties by name) are kept. ``sized_by: hosts`` keeps
exactly ``hosts`` per group; ``instances`` keeps the fewest of the emptiest (at most
``hosts``) on which any one member's GPU instances fit, each whole on one kept host
(first fit, largest first, over free GPUs). Nova has no such rule; the reference
implementation's failover reservations keep room the same way. Used by
``filter_failover_room``.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState, KnowledgeView

#: How hosts are grouped, and how a group's room is sized.
GROUPINGS = ("gpu_model", "availability_zone")
SIZINGS = ("hosts", "instances")


def _group(state: HostState, group_by: str) -> tuple[str, str] | None:
    """The host's group, or None when it belongs to none (no GPUs for ``gpu_model``)."""
    zone = state.availability_zone or ""
    if group_by == "availability_zone":
        return (zone, "")
    gpus = state.topology.gpus if state.topology is not None else ()
    products = sorted({g.device_id or "" for g in gpus})
    return (zone, "|".join(products)) if products else None


def _room(state: HostState) -> tuple[int, int]:
    """(free GPUs, free memory MiB) of a host: what an evacuated host's VMs need most."""
    gpus = state.topology.gpus if state.topology is not None else ()
    memory = 0
    for node in state.nodes.values():
        inventory = node.inventories.get("MEMORY_MB")
        if inventory is not None:
            memory += int((inventory.total - inventory.reserved) * inventory.allocation_ratio
                          - inventory.used)
    return (sum(1 for g in gpus if not g.in_use), memory)


def gpu_instances(state: HostState) -> list[int]:
    """The GPUs each instance holds on the host, largest first.

    By the holder the agent reports per GPU; used GPUs of no known holder count as one
    instance (the worst case: they must land together).
    """
    held: dict[str, int] = {}
    unknown = 0
    for gpu in state.topology.gpus if state.topology is not None else ():
        if gpu.in_use and gpu.instance_uuid:
            held[gpu.instance_uuid] = held.get(gpu.instance_uuid, 0) + 1
        elif gpu.in_use:
            unknown += 1
    return sorted([*held.values(), *([unknown] if unknown else [])], reverse=True)


def _fits(sizes: list[int], room: list[int]) -> bool:
    """Whether instances of ``sizes`` GPUs fit, each whole, in hosts of ``room`` free GPUs.

    First fit, largest first: the classic bin-packing heuristic.
    """
    free = sorted(room, reverse=True)
    for size in sizes:
        slot = next((i for i, r in enumerate(free) if r >= size), None)
        if slot is None:
            return False
        free[slot] -= size
    return True


def _enough(members: list[HostState], sizes: list[list[int]], count: int) -> bool:
    """Whether the ``count`` emptiest members take any one member's GPU instances.

    ``sizes[i]``: :func:`gpu_instances` of ``members[i]``.
    """
    room = [_room(s)[0] for s in members[:count]]
    return all(_fits(wanted, [r for j, r in enumerate(room) if j != i])
               for i, wanted in enumerate(sizes))


def kept_hosts(view: KnowledgeView, hosts: int, group_by: str,
               sized_by: str = "hosts") -> dict[str, tuple[str, str]]:
    """``{host: group}`` of the hosts kept for evacuations in ``view`` (see the module)."""
    groups: dict[tuple[str, str], list[HostState]] = {}
    for state in view.hosts.values():
        group = _group(state, group_by)
        if group is not None and state.enabled and state.up:
            groups.setdefault(group, []).append(state)
    kept = {}
    for group, members in groups.items():
        members.sort(key=lambda s: (tuple(-v for v in _room(s)), s.host))
        count = hosts
        if sized_by == "instances":
            sizes = [gpu_instances(s) for s in members]
            count = next((n for n in range(hosts + 1) if _enough(members, sizes, n)), hosts)
        for state in members[:count]:
            kept[state.host] = group
    return kept

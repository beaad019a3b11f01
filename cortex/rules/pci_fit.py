"""Can a host's free devices serve a request's device demand: Nova's PCI device pool rules.

Nova's ``nova/pci/stats.py PciDeviceStats.support_requests`` applies the requests one
after the other on a copy of the pools, so devices taken by one request are gone for
the next. Per request (``_filter_pools``): devices matching any of its specs
(``pci_device_prop_match``: every key equal, case-insensitively), PFs only when a spec
asks for ``type-PF``, then, with guest NUMA cells given, the NUMA affinity policy
(``_filter_pools_for_numa_cells``, the PCI NUMA affinity policy documentation):

* ``required``: devices on the guest's host cells only;
* ``legacy`` (default): those, and devices with an unknown NUMA node;
* ``preferred``: local devices first, any device otherwise;
* ``socket``: devices on the guest's own host cells when there are enough of them
  (whatever the sockets report); else devices on any cell of the sockets the guest's
  cells are on, where every host cell must report its socket, and a device with an
  unknown node never qualifies (``_filter_pools_for_numa_cells`` tries the stricter
  set first, then ``_filter_pools_for_socket_affinity``).

The device's NUMA node is ``pci_numa_node`` (sysfs), which is what Nova sees.
Keys of a spec that concern Placement (``resource_class``, ``traits``,
``live_migratable``) or only say "PCI" (``capability_type``) are not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from cortex.knowledge.topology import DevicePool, HostTopology

_IGNORED_KEYS = frozenset({"resource_class", "traits", "live_migratable", "capability_type"})


def matches(pool: DevicePool, specs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a pool's devices satisfy any of ``specs`` (no specs: any GPU).

    Nova's ``pci_device_prop_match``: every key of a spec equal, strings compared
    case-insensitively; a key the pool does not have never matches.
    """
    if not specs:
        return True
    attributes = pool.attributes
    for spec in specs:
        for key, wanted in spec.items():
            if key in _IGNORED_KEYS:
                continue
            actual = attributes.get(key)
            if isinstance(wanted, str):
                if actual is None or str(actual) != wanted.lower():
                    break
            elif actual != wanted:
                break
        else:
            return True
    return False


def numa_affinity(topology: HostTopology, pools: list[list], policy: str, count: int,
                  cells: Sequence[int]) -> list[list]:
    """The ``[pool, free count]`` entries the policy allows for a guest on host ``cells``.

    Preferred entries come first (the ``preferred`` policy's order).
    """
    local = [e for e in pools if e[0].numa_node in cells]
    if policy == "required" or _count(local) >= count:
        return local
    if policy == "socket":
        if not topology.sockets_known:
            return []
        sockets = {c.socket for c in topology.cells if c.id in cells}
        allowed = {c.id for c in topology.cells if c.socket in sockets}
        return [e for e in pools if e[0].numa_node in allowed]
    unknown_ok = [e for e in pools if e[0].numa_node in cells or e[0].numa_node is None]
    if policy == "legacy" or _count(unknown_ok) >= count:
        return unknown_ok
    return sorted(pools, key=lambda e: e[0].numa_node not in cells)


def _count(entries: Iterable[list]) -> int:
    """Free devices in ``[pool, free count]`` entries."""
    return sum(e[1] for e in entries)


def pci_refusal(topology: HostTopology, requests: Iterable[Any],
                cells: Sequence[int] | None = None, healthy_only: bool = False) -> str | None:
    """Why the host's free devices cannot serve the ``pci`` DeviceRequests; None if they can.

    ``cells``: host cell ids the guest's NUMA cells landed on (None: no NUMA affinity, as
    Nova's PciPassthroughFilter). ``healthy_only`` leaves GPUs reported unhealthy out.
    Works on the topology's device pools, taking devices from them request by request.
    """
    available: list[list[Any]] = [[pool, len(pool.addresses)] for pool in topology.device_pools
                                  if pool.healthy or not healthy_only]
    for request in requests:
        wants_pf = any(s.get("dev_type") == "type-PF" for s in request.specs)
        entries = [e for e in available if e[1] and (wants_pf or e[0].dev_type != "type-PF")
                   and matches(e[0], request.specs)]
        label = request.name or "device"
        if _count(entries) < request.count:
            return f"{label}: {_count(entries)} free matching devices < {request.count}"
        if cells is not None and request.numa_policy:
            entries = numa_affinity(topology, entries, request.numa_policy, request.count,
                                    cells)
            if _count(entries) < request.count:
                where = ",".join(map(str, cells))
                return (f"{label}: numa_policy {request.numa_policy}: {_count(entries)} of the "
                        f"free devices qualify for host cells {where}, {request.count} needed")
        needed = request.count
        for entry in entries:
            taken = min(entry[1], needed)
            entry[1] -= taken
            needed -= taken
            if not needed:
                break
    return None


def vgpu_refusal(topology: HostTopology, requests: Iterable[Any],
                 healthy_only: bool = False) -> str | None:
    """Why the host cannot serve the ``vgpu`` DeviceRequests; None if it can.

    A request naming a MIG profile needs free MIG instances of that profile; one without
    a profile takes any free MIG instance, and passes on a time-sliced vGPU host, whose
    capacity the agent cannot know. A host whose report holds no MIG or vGPU data at all
    (:func:`knows_vgpus`) passes: the caller's hosts already passed Placement's VGPU
    allocation candidates, and only what the knowledge positively rules out is refused.
    """
    if not knows_vgpus(topology):
        return None
    free: dict[str, int] = {}
    for gpu in topology.gpus:
        if healthy_only and not gpu.healthy:
            continue
        for instance in gpu.mig_instances:
            if not instance.in_use:
                free[instance.profile] = free.get(instance.profile, 0) + 1
    for request in requests:
        if request.mig_profile is None and topology.time_sliced_vgpu:
            continue
        profiles = [request.mig_profile] if request.mig_profile else sorted(free)
        have = sum(free.get(p, 0) for p in profiles)
        if have < request.count:
            what = f"MIG {request.mig_profile}" if request.mig_profile else "vGPU"
            return f"{request.name or 'VGPU'}: {have} free {what} instances < {request.count}"
        needed = request.count
        for profile in profiles:
            used = min(needed, free.get(profile, 0))
            free[profile] = free.get(profile, 0) - used
            needed -= used
    return None


def device_pools(topology: HostTopology, order: Mapping[str, int] | None = None
                 ) -> list[list]:
    """``[[DevicePool, free count]]`` as nova-compute keeps them: one pool per device.

    Nova (34.0, ``nova/pci/stats.py`` ``_create_pool_keys_from_dev``) keys a pool by the
    device's vendor, product, dev_type and sysfs NUMA node *and its PCI address* (a
    device is one Placement resource provider), so every GPU is a pool of its own; pools
    stay in the order the tracker first saw their device (``order``: position in
    nova-compute's device list, default the PCI address order, as at its first start),
    and a freed device returns to its own pool, at that place.
    """
    position = order or {g.pci_address: i for i, g in enumerate(topology.gpus)}
    free = {g.pci_address for g in topology.free_gpus}
    pools = []
    for gpu in sorted((g for g in topology.gpus if g.passthrough and g.pci_address in free),
                      key=lambda g: position.get(g.pci_address, -1)):
        pool = DevicePool(MappingProxyType({
            "vendor_id": gpu.vendor_id.lower(), "product_id": (gpu.device_id or "").lower(),
            "dev_type": gpu.dev_type.lower(), "numa_node": gpu.pci_numa_node}),
            gpu.pci_numa_node, gpu.dev_type, True, (gpu.pci_address,))
        pools.append([pool, 1])
    return pools


def take_devices(topology: HostTopology, requests: Sequence[Any],
                 cells: Sequence[int] | None = None, order: Mapping[str, int] | None = None
                 ) -> tuple[str, ...] | None:
    """PCI addresses nova-compute's ``consume_requests`` takes for the ``pci`` DeviceRequests.

    ``cells``: the guest's host cells (None: no NUMA topology, no affinity). None when
    the requests cannot be served.
    """
    available = device_pools(topology, order)
    remaining = {id(entry[0]): list(entry[0].addresses) for entry in available}
    # pools in order, each pool's devices from its end (``pool['devices'].pop()``)
    taken: list[str] = []
    for request in requests:
        wants_pf = any(s.get("dev_type") == "type-PF" for s in request.specs)
        entries = [e for e in available if e[1] and (wants_pf or e[0].dev_type != "type-PF")
                   and matches(e[0], request.specs)]
        if cells is not None and request.numa_policy:
            entries = numa_affinity(topology, entries, request.numa_policy, request.count,
                                    cells)
        if sum(e[1] for e in entries) < request.count:
            return None
        needed = request.count
        for entry in entries:
            count = min(entry[1], needed)
            devices = remaining[id(entry[0])]
            for _ in range(count):
                taken.append(devices.pop())
            entry[1] -= count
            needed -= count
            if not needed:
                break
    return tuple(taken)


def knows_vgpus(topology: HostTopology) -> bool:
    """Whether the report says anything about vGPUs: a MIG-mode GPU or a vGPU host driver.

    False for a host that reports no such GPU, where Cortex's knowledge of its vGPU
    capacity is missing (Nova models vGPUs in Placement only, never in its filters).
    """
    return any(g.mig_mode == "enabled" or g.mig_instances
               or g.virtualization_mode in ("host_vgpu", "vgpu") for g in topology.gpus)


def device_refusal(topology: HostTopology, request: Any, healthy_only: bool = False
                   ) -> str | None:
    """Why ``topology``'s free devices cannot serve the request's PCI and vGPU demand.

    None when they can: :func:`pci_refusal` of its ``pci_devices`` (no NUMA affinity, as
    Nova's PciPassthroughFilter), then :func:`vgpu_refusal` of its ``vgpu_devices``.
    ``healthy_only`` counts only GPUs reported healthy.
    """
    return (pci_refusal(topology, request.pci_devices, healthy_only=healthy_only)
            or vgpu_refusal(topology, request.vgpu_devices, healthy_only=healthy_only))

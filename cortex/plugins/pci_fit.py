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
* ``socket``: devices on any cell of the sockets the guest's cells are on; every host
  cell must report its socket, and a device with an unknown node never qualifies.

The device's NUMA node is ``pci_numa_node`` (sysfs), which is what Nova sees.
Keys of a spec that concern Placement (``resource_class``, ``traits``,
``live_migratable``) or only say "PCI" (``capability_type``) are not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cortex.knowledge.topology import Gpu, HostTopology

_IGNORED_KEYS = frozenset({"resource_class", "traits", "live_migratable", "capability_type"})


def _attributes(gpu: Gpu) -> dict[str, Any]:
    """The properties a PCI spec is compared with (Nova's pool keys)."""
    return {"vendor_id": gpu.vendor_id, "product_id": gpu.device_id, "dev_type": gpu.dev_type,
            "numa_node": gpu.pci_numa_node, "address": gpu.pci_address}


def matches(gpu: Gpu, specs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the GPU satisfies any of ``specs`` (no specs: any GPU)."""
    if not specs:
        return True
    attributes = _attributes(gpu)
    return any(all(_equal(attributes.get(key), value) for key, value in spec.items()
                   if key not in _IGNORED_KEYS) for spec in specs)


def _equal(actual: Any, wanted: Any) -> bool:
    """Nova's comparison: strings case-insensitively, everything else as is."""
    if isinstance(actual, str):
        actual = actual.lower()
    if isinstance(wanted, str):
        wanted = wanted.lower()
        return str(actual).lower() == wanted if actual is not None else False
    return actual == wanted


def numa_affinity(topology: HostTopology, devices: list[Gpu], policy: str, count: int,
                  cells: Sequence[int]) -> list[Gpu]:
    """The devices the policy allows for a guest on host ``cells``, preferred ones first."""
    if policy == "socket":
        if not topology.sockets_known:
            return []
        sockets = {c.socket for c in topology.cells if c.id in cells}
        allowed = {c.id for c in topology.cells if c.socket in sockets}
        return [d for d in devices if d.pci_numa_node in allowed]
    local = [d for d in devices if d.pci_numa_node in cells]
    if policy == "required" or len(local) >= count:
        return local
    unknown_ok = [d for d in devices if d.pci_numa_node in cells or d.pci_numa_node is None]
    if policy == "legacy" or len(unknown_ok) >= count:
        return unknown_ok
    return sorted(devices, key=lambda d: d.pci_numa_node not in cells)


def pci_refusal(topology: HostTopology, requests: Iterable[Any],
                cells: Sequence[int] | None = None, healthy_only: bool = False) -> str | None:
    """Why the host's free devices cannot serve the ``pci`` DeviceRequests; None if they can.

    ``cells``: host cell ids the guest's NUMA cells landed on (None: no NUMA affinity, as
    Nova's PciPassthroughFilter). ``healthy_only`` leaves GPUs reported unhealthy out.
    """
    available = [g for g in topology.free_gpus if g.healthy or not healthy_only]
    for request in requests:
        wants_pf = any(s.get("dev_type") == "type-PF" for s in request.specs)
        devices = [g for g in available if matches(g, request.specs)
                   and (wants_pf or g.dev_type != "type-PF")]
        label = request.name or "device"
        if len(devices) < request.count:
            return f"{label}: {len(devices)} free matching devices < {request.count}"
        if cells is not None and request.numa_policy:
            devices = numa_affinity(topology, devices, request.numa_policy, request.count,
                                    cells)
            if len(devices) < request.count:
                where = ",".join(map(str, cells))
                return (f"{label}: numa_policy {request.numa_policy}: {len(devices)} of the "
                        f"free devices qualify for host cells {where}, {request.count} needed")
        taken = {d.pci_address for d in devices[:request.count]}
        available = [g for g in available if g.pci_address not in taken]
    return None


def vgpu_refusal(topology: HostTopology, requests: Iterable[Any],
                 healthy_only: bool = False) -> str | None:
    """Why the host cannot serve the ``vgpu`` DeviceRequests; None if it can.

    A request naming a MIG profile needs free MIG instances of that profile; one without
    a profile takes any free MIG instance, and passes on a time-sliced vGPU host, whose
    capacity the agent cannot know.
    """
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

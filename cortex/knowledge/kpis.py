"""Fleet KPIs computed from a knowledge view: utilization, GPUs per model, fragmentation.

Pure functions over an immutable KnowledgeView, so ``/metrics`` can compute them once
per knowledge version and the dashboard can show the same numbers. GPUs are counted
from Placement inventories for now: PCI passthrough GPUs are the
``CUSTOM_PCI_<VENDOR>_<PRODUCT>`` resource classes Nova's PCI-in-Placement reports
(``[pci] report_in_placement``), vGPUs the ``VGPU`` class. Capacity follows
Placement: ``(total - reserved) * allocation_ratio``.

"Free" GPUs are free on hosts that can be scheduled to (service enabled and up);
free GPUs on a disabled or down host are not counted anywhere. A *stranded* GPU is
free on a host that has fewer free GPUs of its model than a request size (4 or 8):
it cannot serve a 4- (8-) GPU request, however many such GPUs the fleet has.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from cortex.knowledge.view import HostState, Inventory, KnowledgeView

#: Request sizes the fragmentation KPI is computed for (GPUs per instance).
REQUEST_SIZES = (4, 8)
#: Resource classes shown as host utilization, in this order (others follow by name).
MAIN_RESOURCE_CLASSES = ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB")
_PCI_CLASS = re.compile(r"^CUSTOM_PCI_(?P<vendor>[0-9A-F]{4})_(?P<product>[0-9A-F]{4})$")
# PCI device ids of NVIDIA data-centre GPUs (vendor 10de), from the PCI ID repository.
_PCI_MODELS = {
    "10DE_2330": "H100 SXM5 80GB", "10DE_2331": "H100 PCIe 80GB", "10DE_2335": "H200 SXM 141GB",
    "10DE_20B0": "A100 SXM4 40GB", "10DE_20B2": "A100 SXM4 80GB", "10DE_20B5": "A100 PCIe 80GB",
    "10DE_20F1": "A100 PCIe 40GB", "10DE_26B5": "L40", "10DE_26B9": "L40S",
}


@dataclass(frozen=True, slots=True)
class Usage:
    """Used and allocatable units of one resource class (Placement units: MiB, GiB, CPUs)."""

    used: float
    capacity: float

    @property
    def ratio(self) -> float | None:
        """``used / capacity`` (may exceed 1 when overcommitted); None without capacity."""
        return self.used / self.capacity if self.capacity > 0 else None


@dataclass(frozen=True, slots=True)
class GpuCount:
    """GPUs of one model in one availability zone: ``free`` (schedulable hosts), ``used``."""

    model: str
    availability_zone: str
    free: int
    used: int


def zone_of(host: HostState) -> str:
    """The host's availability zone, ``none`` when it has none (a label value)."""
    return host.availability_zone or "none"


def schedulable(host: HostState) -> bool:
    """Whether new instances can land on the host (service enabled and up)."""
    return host.enabled and host.up


def host_usage(host: HostState) -> dict[str, Usage]:
    """``{resource class: Usage}`` summed over the host's nodes."""
    used: dict[str, float] = defaultdict(float)
    capacity: dict[str, float] = defaultdict(float)
    for node in host.all_nodes:
        for rc, inventory in node.inventories.items():
            used[rc] += inventory.used
            capacity[rc] += inventory.capacity
    return {rc: Usage(used[rc], capacity[rc]) for rc in sorted(used, key=_class_order)}


def _class_order(rc: str) -> tuple[int, str]:
    """Main resource classes first, in their usual order, then the others by name."""
    return (MAIN_RESOURCE_CLASSES.index(rc) if rc in MAIN_RESOURCE_CLASSES
            else len(MAIN_RESOURCE_CLASSES), rc)


def zone_usage(view: KnowledgeView) -> dict[tuple[str, str], Usage]:
    """``{(availability zone, resource class): Usage}`` summed over the zone's hosts."""
    used: dict[tuple[str, str], float] = defaultdict(float)
    capacity: dict[tuple[str, str], float] = defaultdict(float)
    for host in view.hosts.values():
        for rc, usage in host_usage(host).items():
            used[zone_of(host), rc] += usage.used
            capacity[zone_of(host), rc] += usage.capacity
    return {key: Usage(used[key], capacity[key]) for key in sorted(used)}


def gpu_model(resource_class: str, traits: Iterable[str] = ()) -> str | None:
    """The GPU model a resource class counts, or None when it is not a GPU class.

    ``CUSTOM_PCI_10DE_2330`` -> ``H100 SXM5 80GB`` (unknown ids: ``PCI 10DE:xxxx``);
    ``VGPU`` -> ``vGPU`` plus the node's ``CUSTOM_NVIDIA_*`` trait naming the vGPU type
    when there is one (``vGPU A100_3G_40GB``).
    """
    match = _PCI_CLASS.match(resource_class)
    if match:
        key = f"{match['vendor']}_{match['product']}"
        return _PCI_MODELS.get(key, f"PCI {match['vendor']}:{match['product']}")
    if resource_class == "VGPU":
        named = sorted(t for t in traits if t.startswith("CUSTOM_NVIDIA_"))
        return f"vGPU {named[0][len('CUSTOM_NVIDIA_'):]}" if named else "vGPU"
    return None


def host_gpus(host: HostState) -> list[tuple[str, bool, Inventory]]:
    """``[(model, passthrough, inventory)]`` of the host's GPU inventories.

    ``passthrough`` is True for whole PCI GPUs, False for vGPUs.
    """
    found = []
    for node in host.all_nodes:
        for rc, inventory in sorted(node.inventories.items()):
            model = gpu_model(rc, node.traits)
            if model is not None:
                found.append((model, rc != "VGPU", inventory))
    return found


def free_units(inventory: Inventory) -> int:
    """Whole units still allocatable (0 when full or overcommitted)."""
    return max(int(inventory.free), 0)


def gpu_counts(view: KnowledgeView) -> list[GpuCount]:
    """GPUs per (model, availability zone): free on schedulable hosts, and used."""
    free: dict[tuple[str, str], int] = defaultdict(int)
    used: dict[tuple[str, str], int] = defaultdict(int)
    for host in view.hosts.values():
        for model, _, inventory in host_gpus(host):
            key = (model, zone_of(host))
            used[key] += inventory.used
            free[key] += free_units(inventory) if schedulable(host) else 0
    return [GpuCount(model, zone, free[model, zone], used[model, zone])
            for model, zone in sorted(used)]


def stranded_gpus(view: KnowledgeView,
                  sizes: Iterable[int] = REQUEST_SIZES) -> dict[tuple[str, str, int], int]:
    """``{(model, availability zone, size): GPUs}`` free but unable to serve ``size`` GPUs.

    Per schedulable host and passthrough model, free GPUs ``f`` with ``0 < f < size``
    count as stranded for that size (one instance's GPUs must come from one host).
    Every (model, zone, size) of the fleet's passthrough GPUs has an entry, 0 included.
    """
    stranded: dict[tuple[str, str, int], int] = {}
    for host in view.hosts.values():
        for model, passthrough, inventory in host_gpus(host):
            if not passthrough:
                continue
            free = free_units(inventory) if schedulable(host) else 0
            for size in sizes:
                key = (model, zone_of(host), size)
                stranded[key] = stranded.get(key, 0) + (free if 0 < free < size else 0)
    return dict(sorted(stranded.items()))

"""What a Nova request asks of a host: its device demand by kind, whole GPUs, ratios.

One answer for each question the filters, weighers, metrics and the simulator ask of
a request: the device requests come parsed from the body
(:mod:`cortex.request.devices`: PCI requests, ``pci_passthrough:alias``, Placement
request groups, Cyborg device profiles); the allocation ratios are the node's
Placement inventories'.
"""

from __future__ import annotations

from typing import Any

from cortex.rules.pci_fit import pci_refusal, vgpu_refusal


def pci_requests(request: Any) -> tuple[Any, ...]:
    """The request's whole-device demand (passthrough GPUs, PGPU, CUSTOM_PCI_*)."""
    return tuple(r for r in request.device_requests if r.kind == "pci")


def vgpu_requests(request: Any) -> tuple[Any, ...]:
    """The request's vGPU demand."""
    return tuple(r for r in request.device_requests if r.kind == "vgpu")


def gpu_count(request: Any) -> int:
    """Passthrough devices (whole GPUs) the request asks for, over all its PCI requests.

    The number nova-compute claims (``PciDeviceStats.consume_requests`` takes every
    request's ``count``), so the number every GPU rule of Cortex counts with.
    """
    return sum(r.count for r in pci_requests(request))


def asks_for_devices(request: Any) -> bool:
    """Whether a Nova request asks for devices: GPUs, PCI devices or vGPUs.

    Its device requests, or an alias or device profile Cortex has no definition of
    (the demand is there, unknown in size). The ``gpu`` condition of the pipeline
    choice rules.
    """
    return bool(getattr(request, "device_requests", ()) or getattr(request,
                                                                    "unresolved_devices", ()))


def allocation_ratios(host: Any, candidate: Any) -> tuple[float, float]:
    """``(cpu_allocation_ratio, ram_allocation_ratio)`` of the named node's inventories.

    Nova's NUMATopologyFilter takes the compute node's ratios, which are the VCPU and
    MEMORY_MB inventories' allocation ratios in Placement; 1.0 where there is none.
    """
    nodes = host.nodes_named(candidate.nodes)
    inventories = nodes[0].inventories if nodes else {}
    cpu = inventories.get("VCPU")
    ram = inventories.get("MEMORY_MB")
    return (cpu.allocation_ratio if cpu else 1.0, ram.allocation_ratio if ram else 1.0)


def device_refusal(topology: Any, request: Any, healthy_only: bool = False) -> str | None:
    """Why ``topology``'s free devices cannot serve the request's PCI and vGPU demand.

    None when they can. ``healthy_only`` counts only GPUs reported healthy (rules in
    :mod:`cortex.rules.pci_fit`).
    """
    return (pci_refusal(topology, pci_requests(request), healthy_only=healthy_only)
            or vgpu_refusal(topology, vgpu_requests(request), healthy_only=healthy_only))

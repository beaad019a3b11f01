"""What the topology filters share: their options and the host facts they read besides topology."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cortex.plugins.pci_fit import pci_refusal, vgpu_refusal

UNKNOWN_POLICIES = ("pass", "fail")


@dataclass(frozen=True)
class TopologyOptions:
    """Options of the topology filters.

    ``unknown_topology``: a host without an agent report ``pass``es (Nova already checked
    it with what Nova knows) or ``fail``s (only hosts Cortex can vouch for).
    """

    unknown_topology: str = "pass"

    def __post_init__(self) -> None:
        if self.unknown_topology not in UNKNOWN_POLICIES:
            raise ValueError(f"unknown_topology must be one of {', '.join(UNKNOWN_POLICIES)}")


def unknown_topology(options: TopologyOptions) -> str | None:
    """The verdict on a host with no topology report: None (pass) or the reason."""
    return None if options.unknown_topology == "pass" else "no topology report from cortex-agent"


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


def pci_requests(request: Any) -> tuple[Any, ...]:
    """The request's whole-device demand (passthrough GPUs, PGPU, CUSTOM_PCI_*)."""
    return tuple(r for r in request.device_requests if r.kind == "pci")


def vgpu_requests(request: Any) -> tuple[Any, ...]:
    """The request's vGPU demand."""
    return tuple(r for r in request.device_requests if r.kind == "vgpu")


def device_refusal(topology: Any, request: Any, healthy_only: bool = False) -> str | None:
    """Why ``topology``'s free devices cannot serve the request's PCI and vGPU demand.

    None when they can. ``healthy_only`` counts only GPUs reported healthy. Shared by
    filter_gpu_capacity and filter_gpu_health (rules in cortex.plugins.pci_fit).
    """
    return (pci_refusal(topology, pci_requests(request), healthy_only=healthy_only)
            or vgpu_refusal(topology, vgpu_requests(request), healthy_only=healthy_only))

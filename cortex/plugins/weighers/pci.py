"""weigher_pci: prefer hosts with fewer free PCI devices, as Nova's PCIWeigher.

Rule: Nova's PCIWeigher (``nova/scheduler/weights/pci.py``, ``[filter_scheduler]
pci_weight_multiplier``): the fewer free PCI devices a host has, the better. For a
request of PCI devices this stacks them onto partly used hosts and keeps whole hosts
free; for other requests it keeps them off hosts with devices. The raw weight is
``-free / max_devices``, free being the host's free passthrough GPUs from its
topology report (Nova counts every device in its PCI pools; Cortex knows the GPUs). Nova
normalises the weights over the candidates before the multiplier; Cortex squashes the
raw weight with tanh, so ``max_devices`` sets the scale. Hosts without a report weigh 0.
Used by the ``nova-baseline`` pipeline to stand for Nova's defaults. Invert: a
negative multiplier spreads (Nova accepts only positive ones).
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@dataclass(frozen=True)
class PciOptions:
    """``max_devices`` > 0: the free-device count that weighs -1."""

    max_devices: int = 8

    def __post_init__(self) -> None:
        """Reject a non-positive scale."""
        if self.max_devices <= 0:
            raise ValueError("max_devices must be > 0")


@register
class PCIWeigher(Weigher[NovaRequest, HostState]):
    """Minus the free passthrough devices of the host, scaled."""

    name = "weigher_pci"
    host_only = True
    Options = PciOptions

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-free passthrough GPUs / max_devices``; 0 without a topology report."""
        if host.topology is None:
            return 0.0
        return -len(host.topology.free_gpus) / self.options.max_devices

"""weigher_cpu: prefer hosts with more free CPUs left (spread), or fewer (stack).

Nova's CPUWeigher (``nova/scheduler/weights/cpu.py``): the raw weight is the share of
the node's CPU capacity (``(total - reserved) * allocation_ratio``) still free after
placing the request, 1 for an empty node, 0 for a full one; the best of the named
nodes counts. The class weighed is the one the request asks for: PCPU for pinned
(``hw:cpu_policy=dedicated``) requests, VCPU otherwise (Nova weighs VCPU only).
``measure: free_vcpus`` weighs what Nova does instead: ``vcpus_total *
cpu_allocation_ratio - vcpus_used``, the shared CPUs' capacity less the reserved host
CPUs and every guest's vCPUs, pinned ones included (VCPU and PCPU usage), before
placement, whatever the request (:func:`cortex.rules.measures.nova_free`). A
positive multiplier spreads (Nova's default ``cpu_weight_multiplier = 1.0``), a negative
one stacks. Nova weighs the absolute free count normalised over the candidates;
Cortex weighs the share. A host without that inventory (nor, for ``free_vcpus``, PCPU)
weighs 0.
"""

from __future__ import annotations

from cortex.plugins.measure_options import FreeResourceWeigher, FreeVcpusOptions
from cortex.plugins.registry import register
from cortex.request import NovaRequest


@register
class CPUWeigher(FreeResourceWeigher):
    """Free share of the requested CPU class after placement."""

    name = "weigher_cpu"
    Options = FreeVcpusOptions
    resource_class = "VCPU"

    def weighed_class(self, request: NovaRequest) -> str:
        """PCPU for a request of dedicated CPUs, else VCPU."""
        return "PCPU" if "PCPU" in request.resources else "VCPU"

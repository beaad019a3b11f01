"""filter_has_enough_capacity: the host's Placement inventories can hold the flavor.

Placement's rule per resource class, on the node(s) the caller named:
``used + requested <= (total - reserved) * allocation_ratio``, with ``min_unit``,
``max_unit`` and ``step_size``. The requested amounts are Nova's
(:func:`cortex.request.nova.requested_resources`: VCPU or PCPU for pinned CPUs,
MEMORY_MB, DISK_GB with swap and ephemeral, ``resources:*`` overrides). A class
the host has no inventory of fails it. Only the classes in ``resource_classes``
are checked. Not run on rebuild (the instance already holds its resources).
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.plugins.base import Filter
from cortex.plugins.registry import register


@dataclass(frozen=True)
class HasEnoughCapacityOptions:
    """``resource_classes``: which requested classes to check."""

    resource_classes: tuple[str, ...] = ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB")


@register
class HasEnoughCapacityFilter(Filter):
    """Remove hosts without room for the requested resources."""

    name = "filter_has_enough_capacity"
    Options = HasEnoughCapacityOptions

    def check(self, host, request, candidate) -> str | None:
        """Reason of the first node-independent refusal, when no named node fits."""
        wanted = {rc: n for rc, n in request.resources.items()
                  if rc in self.options.resource_classes}
        reason = "no node"
        for node in host.nodes_named(candidate.nodes):
            reason = _refusal(node.inventories, wanted)
            if reason is None:
                return None
        return reason


def _refusal(inventories, wanted: dict[str, int]) -> str | None:
    """The first resource class of ``wanted`` that does not fit ``inventories``."""
    for rc, amount in wanted.items():
        inventory = inventories.get(rc)
        if inventory is None:
            return f"no {rc} inventory"
        refusal = inventory.refusal(amount)
        if refusal:
            return f"{rc}: {refusal}"
    return None

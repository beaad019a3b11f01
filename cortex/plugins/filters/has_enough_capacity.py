"""filter_has_enough_capacity: the host's Placement inventories can hold the flavor.

Placement's rule per resource class (:func:`cortex.rules.capacity.capacity_refusal`),
on the node(s) the caller named: ``used + requested <= (total - reserved) *
allocation_ratio``, with ``min_unit``, ``max_unit`` and ``step_size``. The requested
amounts are Nova's (:func:`cortex.request.nova.requested_resources`: VCPU, or PCPU for
``hw:cpu_policy=dedicated`` or ``resources:PCPU``; MEMORY_MB; DISK_GB with swap and
ephemeral, 0 root disk when booting from volume; ``resources:*`` overrides). A class
the host has no inventory of fails it. Only the classes in ``resource_classes`` are
checked (the reference implementation ignores disk; Cortex checks it by default).
In-progress migrations into or out of the host (HostState.migrations: claims
Placement's usage does not show yet) count as used on both source and destination
until they end (``count_migrations``). Not run on rebuild (the instance already holds
its resources). Invert: none; narrow ``resource_classes`` to check fewer classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.capacity import CapacityTable, capacity_refusal, migration_claims

#: The share of a view's hosts up to which ``check_all`` checks each host asked rather than
#: build the view's capacity tables (a table walks and sorts every host of the view; the
#: few hosts asked when the others' answers are kept cost less checked one by one).
DIRECT_SHARE = 0.125


@dataclass(frozen=True)
class HasEnoughCapacityOptions:
    """``resource_classes``: which requested classes to check; ``count_migrations``."""

    resource_classes: tuple[str, ...] = ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB")
    count_migrations: bool = True


@register
class HasEnoughCapacityFilter(Filter[NovaRequest, HostState]):
    """Remove hosts without room for the requested resources."""

    name = "filter_has_enough_capacity"
    Options = HasEnoughCapacityOptions

    def memo_key(self, request: NovaRequest) -> tuple[tuple[str, int], ...]:
        """The amounts asked of the classes the filter checks."""
        return tuple(sorted((rc, n) for rc, n in request.resources.items()
                            if rc in self.options.resource_classes))

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason of the last named node's refusal, when no named node fits."""
        wanted = {rc: n for rc, n in request.resources.items()
                  if rc in self.options.resource_classes}
        pending = migration_claims(host) if self.options.count_migrations else {}
        reason: str | None = "no node"
        for node in host.nodes_named(candidate.nodes):
            reason = capacity_refusal(node.inventories, wanted, pending)
            if reason is None:
                return None
        return reason

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of the hosts that may fail; the others are cleared by free capacity.

        Per requested class, the synced view's CapacityTable (built once per knowledge
        version) names the hosts that might not fit (sorted free capacity, one test per
        kind of inventory units); only those, hosts with several nodes or migrations,
        and hosts whose state an overlay changed (in-flight reservations) are checked
        host by host. Asked about few hosts (at most :data:`DIRECT_SHARE` of the view's,
        as when the other hosts' answers are kept, :mod:`cortex.pipeline.memo`), it checks
        each of them instead: a table costs a walk over every host of the view. The
        answers are the same either way (the table only clears hosts that fit).
        """
        if view is None or request.service != "nova":
            return super().check_all(hosts, request, view)
        root = view.root
        if len(hosts) <= len(root.hosts) * DIRECT_SHARE:
            return super().check_all(hosts, request, view)
        suspects: set[str] = set()
        for rc, amount in request.resources.items():
            if rc in self.options.resource_classes:
                table = root.derived(("capacity-table", rc), partial(CapacityTable, rc=rc))
                suspects |= table.suspects(amount)
        synced = root.hosts
        removed = {}
        for candidate, state in hosts:
            if candidate.host in suspects or synced.get(candidate.host) is not state:
                reason = self.check(state, request, candidate)
                if reason is not None:
                    removed[candidate.host] = reason
        return removed

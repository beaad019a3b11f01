"""filter_has_enough_capacity: the host's Placement inventories can hold the flavor.

Placement's rule per resource class, on the node(s) the caller named:
``used + requested <= (total - reserved) * allocation_ratio``, with ``min_unit``,
``max_unit`` and ``step_size``. The requested amounts are Nova's
(:func:`cortex.request.nova.requested_resources`: VCPU, or PCPU for
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

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)

# Nova's migration statuses after which a migration claims nothing any more.
FINAL_STATUSES = frozenset({"confirmed", "reverted", "error", "failed", "completed",
                            "cancelled", "done"})


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
            reason = _refusal(node.inventories, wanted, pending)
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
        host by host.
        """
        if view is None or request.service != "nova":
            return super().check_all(hosts, request, view)
        root = view.root
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


class CapacityTable:
    """One resource class's free capacity over the single-node hosts of a view.

    ``headroom = floor(capacity) - used`` is the most that fits by Placement's capacity
    rule (``used + n <= capacity`` for whole ``n``); hosts are sorted by it and grouped
    by their inventory's ``(min_unit, max_unit, step_size)``. Hosts with several nodes,
    in-progress migrations or no inventory of the class are always suspects.
    """

    def __init__(self, view: KnowledgeView, rc: str) -> None:
        rows: list[tuple[int, str]] = []
        self.always: set[str] = set()
        self.units: dict[tuple[int, int, int], list[str]] = {}
        for name, host in view.hosts.items():
            inventory = host.all_nodes[0].inventories.get(rc) if len(host.all_nodes) == 1 \
                else None
            if inventory is None or host.migrations or not math.isfinite(inventory.capacity):
                self.always.add(name)
                continue
            rows.append((math.floor(inventory.capacity) - inventory.used, name))
            units = (inventory.min_unit, inventory.max_unit, inventory.step_size)
            self.units.setdefault(units, []).append(name)
        rows.sort()
        self.headroom = [h for h, _ in rows]
        self.names = [n for _, n in rows]

    def suspects(self, amount: int) -> set[str]:
        """Hosts that may not fit ``amount``: every host that does is left out."""
        suspects = set(self.always)
        suspects.update(self.names[:bisect.bisect_left(self.headroom, amount)])
        for (min_unit, max_unit, step_size), names in self.units.items():
            if amount < min_unit or (max_unit and amount > max_unit) or (
                    step_size > 1 and amount % step_size):
                suspects.update(names)
        return suspects


def migration_claims(host) -> dict[str, int]:
    """Resource amounts held on ``host`` by its in-progress migrations, per class."""
    claims: dict[str, int] = {}
    for migration in host.migrations:
        if migration.status.lower() in FINAL_STATUSES:
            continue
        for rc, amount in migration.resources.items():
            claims[rc] = claims.get(rc, 0) + amount
    return claims


def _refusal(inventories, wanted: dict[str, int], pending: dict[str, int]) -> str | None:
    """The first resource class of ``wanted`` that does not fit ``inventories``."""
    for rc, amount in wanted.items():
        inventory = inventories.get(rc)
        if inventory is None:
            return f"no {rc} inventory"
        if pending.get(rc):
            inventory = dataclasses.replace(inventory, used=inventory.used + pending[rc])
        refusal = inventory.refusal(amount)
        if refusal:
            suffix = f" (incl. {pending[rc]} for migrations)" if pending.get(rc) else ""
            return f"{rc}: {refusal}{suffix}"
    return None

"""Placement's capacity rule over a node's inventories, and an index that skips the sure fits.

Per resource class: ``used + requested <= (total - reserved) * allocation_ratio`` with
``min_unit``, ``max_unit`` and ``step_size`` (Placement's allocation candidates;
:meth:`cortex.knowledge.view.Inventory.refusal`); a class the node has no inventory of
fails it. In-progress migrations (Nova's, not yet in Placement's usage) hold their
amounts until they reach a final status (:func:`migration_claims`).
:class:`CapacityTable` names, per class, the hosts of a view that might not fit an
amount, so ``filter_has_enough_capacity`` asks only about those.
"""

from __future__ import annotations

import bisect
import dataclasses
import math

from cortex.knowledge.view import KnowledgeView

#: Nova's migration statuses after which a migration claims nothing any more.
FINAL_STATUSES = frozenset({"confirmed", "reverted", "error", "failed", "completed",
                            "cancelled", "done"})


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


def capacity_refusal(inventories, wanted: dict[str, int], pending: dict[str, int]) -> str | None:
    """The first resource class of ``wanted`` that does not fit ``inventories``, with why.

    ``inventories``: ``{class: Inventory}`` of one node; ``wanted``: amounts per class;
    ``pending``: amounts in-progress migrations hold, counted as used (noted in the
    reason). None when every class fits.
    """
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

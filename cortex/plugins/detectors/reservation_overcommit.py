"""detector_reservation_overcommit: move others' instances off hosts commitments overfill.

Rule: the free holds of the active commitments (:mod:`cortex.knowledge.commitments`:
room promised to a project that its instances do not use yet) count as used, as the
scheduler counts them for everybody but their owner. A host where some resource is then
used beyond its capacity (Placement's ``(total - reserved) * allocation_ratio``) broke
a promise: an instance of a project that holds nothing there is moved off, the
instances in a task and not ``active`` left alone, ties by uuid. The reference
implementation's descheduler detects hosts overloaded by reservations the same way.
"""

from __future__ import annotations

from typing import Any

from cortex.knowledge.commitments import counted_holds
from cortex.knowledge.reservations import with_reservations
from cortex.knowledge.view import KnowledgeView
from cortex.plugins.base import Detector, MoveCandidate
from cortex.plugins.registry import register


@register
class ReservationOvercommitDetector(Detector):
    """Hosts whose usage plus committed holds exceed a capacity: others' instances."""

    name = "detector_reservation_overcommit"

    def detect(self, view: KnowledgeView, now: Any) -> list[MoveCandidate]:
        """Per overfilled host, every movable instance of a project without a hold there."""
        holds = counted_holds(view.commitments, view.hosts, None, now)
        if not holds:
            return []
        held = with_reservations(view, holds, now)
        owners: dict[str, set[str]] = {}
        for commitment in view.commitments:
            for hold in commitment.holds:
                owners.setdefault(hold.host, set()).add(commitment.project_id)
        found = []
        for name in sorted({h.host for h in holds}):
            state = held.hosts.get(name)
            if state is None:
                continue
            over = [(rc, inv) for node in state.all_nodes
                    for rc, inv in node.inventories.items() if inv.used > inv.capacity]
            if not over:
                continue
            rc, inventory = over[0]
            reason = (f"{rc} used {inventory.used:g} with committed holds > capacity "
                      f"{inventory.capacity:g} on {name}")
            for instance in sorted(view.hosts[name].instances, key=lambda i: i.uuid):
                if (instance.project_id in owners.get(name, ()) or instance.task_state
                        or instance.vm_state not in (None, "active")):
                    continue
                found.append(MoveCandidate(instance.uuid, name, self.name,
                                           f"{reason}; project {instance.project_id} "
                                           "holds nothing there",
                                           score=inventory.used - inventory.capacity))
        return found

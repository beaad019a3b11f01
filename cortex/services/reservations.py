"""In-flight reservations and group promises, as ``cortex-manage reservations`` shows them.

A group promise holds the room of every member of a gang in one transaction
(:mod:`cortex.scheduler.groups`); these functions read and prune them beside the
single reservations of a :class:`~cortex.store.reservations.ReservationStore`.
"""

from datetime import datetime
from typing import Any

from cortex.scheduler.groups import group_store

GROUP_COLUMNS = ("key", "service", "members", "placed", "hosts", "expires_at")


def group_rows(store: Any, now: datetime) -> list[dict[str, Any]]:
    """The group promises unexpired at ``now`` beside ``store``, oldest first, as table rows.

    A row: :data:`GROUP_COLUMNS`; ``members`` the group's size, ``placed`` how many
    members it holds room for, ``hosts`` ``{host: members promised there}``,
    ``expires_at`` UTC to the second. Empty for a store without group promises.
    """
    groups = group_store(store)
    rows = []
    for group in [] if groups is None else groups.active(now):
        hosts: dict[str, int] = {}
        for host in group.hosts:
            hosts[host] = hosts.get(host, 0) + 1
        rows.append({"key": group.key, "service": group.service, "members": group.members,
                     "placed": group.placed, "hosts": hosts,
                     "expires_at": group.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return rows


def prune(store: Any, now: datetime, metrics: Any = None) -> tuple[int, int]:
    """Delete the group promises and reservations expired at ``now``.

    Group promises go first, so members a group never used are counted as
    ``expired`` in ``cortex_group_placements_total`` (when ``metrics`` is given).
    Returns ``(group promises pruned, reservations pruned)``.
    """
    groups = group_store(store)
    pruned = [] if groups is None else groups.prune(now)
    for group, unclaimed in pruned:
        if unclaimed and metrics is not None:
            metrics.group_placements.labels(group.service, "expired").inc()
    return len(pruned), store.prune(now)

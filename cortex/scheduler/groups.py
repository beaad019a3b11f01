"""Groups as the other layers ask for them: a pod's judging call, the promises beside a store.

A call that is a member of a group placed all or nothing (a Nova multi-create, a
``group_size`` hint group, a Kubernetes pod group: :func:`cortex.scheduler.promise.gang_of`)
has every member's room planned and promised at its first member's call, or none
(:func:`cortex.scheduler.promise.promise_group`); the promise and the group's names
are :mod:`cortex.scheduler.promise`'s. Here: the run options of a pod's filter and
prioritize calls (:func:`holding`), and the group promises a reservation store keeps
(:func:`group_store`, :func:`group_promises`), for the Kubernetes extender, the
``reservations`` command and the network API.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from cortex.scheduler.promise import gang_of, group_store

__all__ = ["group_promises", "group_store", "holding"]


def holding(request: Any, options: Any) -> Any:
    """``options`` (a :class:`~cortex.scheduler.service.RunOptions`) for a judging call.

    A pod of a group is promised at its filter and prioritize calls (the group's room
    held whole at the first member's, or every node failed; a later member's promised
    node answered first), where a lone pod is promised only at its bind.
    """
    return dataclasses.replace(options, promise=True) if gang_of(request) else options


def group_promises(store: Any, now: datetime) -> list[dict[str, Any]]:
    """The group promises unexpired at ``now`` beside ``store``, oldest first, as JSON.

    Empty for a store without group promises. Raises as the store does.
    """
    groups = group_store(store)
    return [] if groups is None else [g.as_dict() for g in groups.active(now)]

"""Kubernetes nodes' labels in the database, as the extender learns them; pods' placements.

kube-scheduler sends the Node objects (``nodeCacheCapable: false``) with every call; a
node's labels are written only when they differ from what the knowledge holds, with a
knowledge-version bump, so every worker's next view has them
(:func:`cortex.knowledge.loader.load_view`: the zone label is the node's availability
zone).

A bound pod's GPU demand is recorded once (:mod:`cortex.services.kubernetes`): the decision
that carries it has the id :func:`placement_id` names after the pod, so a bind retried,
in this worker or another, finds it (:func:`placement_recorded`), and a second record
under that id is refused by the primary keys of ``decisions`` and ``gpu_demand``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import Connection, delete, insert, select

from cortex.db import models
from cortex.store.version import bump_version

#: The namespace of :func:`placement_id`'s name-based UUIDs.
PLACEMENTS = uuid.UUID("0b6f3c8e-5d1a-5c7e-9a43-6f1d2e8b7c10")


def remember_labels(connection: Connection, labels: Mapping[str, Mapping[str, str]],
                    now: datetime) -> None:
    """Store ``{node: labels}`` (replacing what was stored) and move the version."""
    table = models.KubernetesNode.__table__
    connection.execute(delete(table).where(table.c.name.in_(list(labels))))
    connection.execute(insert(table), [{"name": name, "labels": dict(values),
                                        "updated_at": now}
                                       for name, values in labels.items()])
    bump_version(connection)


def placement_id(pod_uid: str) -> str:
    """The id of the decision that records the placement of the pod ``pod_uid``.

    A name-based UUID (version 5) of the pod's UID: the same for every bind of the pod,
    in every worker; another pod (a new UID, even under the same name) gets another.
    """
    return str(uuid.uuid5(PLACEMENTS, f"pod:{pod_uid}"))


def placement_recorded(connection: Connection, decision_id: str) -> bool:
    """Whether ``gpu_demand`` holds the row of ``decision_id`` (a primary-key look-up)."""
    return connection.execute(
        select(models.GpuDemand.decision_id).where(
            models.GpuDemand.decision_id == decision_id)).first() is not None

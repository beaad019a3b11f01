"""Kubernetes nodes' labels in the database, as the extender learns them.

kube-scheduler sends the Node objects (``nodeCacheCapable: false``) with every call; a
node's labels are written only when they differ from what the knowledge holds, with a
knowledge-version bump, so every worker's next view has them
(:func:`cortex.knowledge.loader.load_view`: the zone label is the node's availability
zone).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import Connection, delete, insert

from cortex.db import models
from cortex.store.version import bump_version


def remember_labels(connection: Connection, labels: Mapping[str, Mapping[str, str]],
                    now: datetime) -> None:
    """Store ``{node: labels}`` (replacing what was stored) and move the version."""
    table = models.KubernetesNode.__table__
    connection.execute(delete(table).where(table.c.name.in_(list(labels))))
    connection.execute(insert(table), [{"name": name, "labels": dict(values),
                                        "updated_at": now}
                                       for name, values in labels.items()])
    bump_version(connection)

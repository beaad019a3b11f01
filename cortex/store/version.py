"""The knowledge version: the one counter every write of the knowledge moves.

API workers compare it with their view's (:func:`cortex.knowledge.loader.read_version`)
and load a new view when it moved. Every writer of knowledge (the fleet import, agent
reports, network locations, the sync's sources) bumps it here, in its own transaction,
so a reader never sees a version without the rows behind it.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, update

from cortex.db import models


def bump_version(connection: Connection) -> None:
    """Increment the knowledge version in the caller's transaction."""
    table = models.KnowledgeVersion.__table__
    connection.execute(update(table).where(table.c.id == 1).values(
        version=table.c.version + 1, updated_at=func.now()))

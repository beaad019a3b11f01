"""Leader election between cortex-sync replicas: one PostgreSQL advisory lock.

The leader holds a session-level ``pg_try_advisory_lock`` on a connection of its
own for as long as it lives. When its process dies, PostgreSQL closes the session
and frees the lock, and the next replica that tries takes it. Each source run also
takes a transaction-level lock per source, so a ``cortex-manage sync --once`` next
to a running leader waits instead of interleaving its writes. On SQLite (the
embedded, single-process default) there is nobody to elect: the process leads.
"""

from __future__ import annotations

import logging
import zlib

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

LOG = logging.getLogger(__name__)

# "cortexsy" in ASCII: unique to Cortex, distinct from the migration lock.
LEADER_LOCK_ID = 0x636F7274657873


def source_lock_id(source: str) -> int:
    """The advisory lock id of one source (a 31-bit CRC of its name, offset from the leader's)."""
    return LEADER_LOCK_ID + 1 + (zlib.crc32(source.encode()) & 0x7FFFFFFF)


def lock_source(connection: Connection, source: str) -> None:
    """Wait for the transaction-level lock of ``source`` (PostgreSQL only; freed at commit)."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                           {"id": source_lock_id(source)})


class LeaderLock:
    """The leader lock of ``engine``'s database, held on a dedicated connection.

    ``try_acquire()`` returns True when this process leads (now or already);
    ``held()`` checks the lock connection is still alive (a broken connection
    means the lock is gone: the process must stop syncing); ``release()`` gives
    it up. Not thread-safe: one loop owns it.
    """

    def __init__(self, engine: Engine, lock_id: int = LEADER_LOCK_ID) -> None:
        self._engine = engine
        self._lock_id = lock_id
        self._connection: Connection | None = None
        self._always = engine.dialect.name != "postgresql"

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True while this process holds it."""
        if self._always or self.held():
            return True
        try:
            connection = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            got = connection.execute(text("SELECT pg_try_advisory_lock(:id)"),
                                     {"id": self._lock_id}).scalar()
        except SQLAlchemyError as exc:
            LOG.warning("leader lock: database unreachable (%s)", type(exc).__name__)
            return False
        if got:
            self._connection = connection
            LOG.info("leader lock taken: this process syncs")
            return True
        connection.close()
        return False

    def held(self) -> bool:
        """True while the lock connection answers; drops it (and the lock) otherwise."""
        if self._always:
            return True
        if self._connection is None:
            return False
        try:
            self._connection.execute(text("SELECT 1"))
            return True
        except SQLAlchemyError:
            LOG.warning("leader lock lost: its database connection broke")
            self._drop()
            return False

    def release(self) -> None:
        """Give the lock up (closing the session frees it even if the unlock fails)."""
        if self._connection is None:
            return
        try:
            self._connection.execute(text("SELECT pg_advisory_unlock(:id)"),
                                     {"id": self._lock_id})
        except SQLAlchemyError:
            pass
        self._drop()

    def _drop(self) -> None:
        """Close and forget the lock connection."""
        try:
            if self._connection is not None:
                self._connection.invalidate()
                self._connection.close()
        except SQLAlchemyError:
            pass
        self._connection = None

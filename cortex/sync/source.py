"""What a sync source is, and the context it writes its snapshot through."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Connection, Table

from cortex.sync.snapshot import SnapshotTable, TableCounts


class SyncContext:
    """One run of one source: its transaction, the batch size and what each table got.

    ``tables`` maps a table name to its :class:`TableCounts` (summed over the run);
    ``detail`` is free-form JSON kept in ``sync_status.detail`` (warnings, skips);
    ``previous`` is the ``detail`` of the source's last successful run (empty before
    the first), from which a source that reads changes learns where it stopped.
    """

    def __init__(self, connection: Connection, batch_size: int = 1000,
                 previous: Mapping[str, Any] | None = None) -> None:
        self.connection = connection
        self.batch_size = batch_size
        self.tables: dict[str, TableCounts] = {}
        self.detail: dict[str, Any] = {}
        self.previous: Mapping[str, Any] = previous or {}

    def snapshot(self, table: Table | Any, key: tuple[str, ...],
                 scope: ColumnElement[bool] | None = None) -> SnapshotTable:
        """A :class:`SnapshotTable` whose counts are added to ``tables`` on ``finish``."""
        snapshot = SnapshotTable(self.connection, table, key, scope, self.batch_size)
        finish = snapshot.finish

        def finish_and_count() -> TableCounts:
            counts = finish()
            self.count(snapshot.table.name, counts)
            return counts

        snapshot.finish = finish_and_count  # type: ignore[method-assign]
        return snapshot

    def replace(self, table: Table | Any, rows: Iterable[Mapping[str, Any]],
                key: tuple[str, ...], scope: ColumnElement[bool] | None = None) -> TableCounts:
        """Make ``table`` (within ``scope``) hold exactly ``rows``; the counts."""
        snapshot = self.snapshot(table, key, scope)
        rows = list(rows)
        snapshot.prune_to({tuple(row[k] for k in key) for row in rows})
        snapshot.add(rows)
        return snapshot.finish()

    def count(self, name: str, counts: TableCounts) -> None:
        """Add ``counts`` to the run's total for table ``name``."""
        total = self.tables.setdefault(name, TableCounts())
        total.rows += counts.rows
        total.upserted += counts.upserted
        total.deleted += counts.deleted

    def warn(self, message: str) -> None:
        """Keep a warning (bounded to the 20 newest) in the run's detail."""
        warnings = self.detail.setdefault("warnings", [])
        warnings.append(message[:500])
        del warnings[:-20]

    @property
    def rows(self) -> int:
        """Rows in the snapshot, all tables."""
        return sum(c.rows for c in self.tables.values())

    @property
    def changed(self) -> int:
        """Rows inserted, updated or deleted, all tables."""
        return sum(c.changed for c in self.tables.values())


class Source(ABC):
    """A sync source: reads one service and writes its full snapshot through a SyncContext.

    ``name`` is the source's name in ``[sync] sources``, ``sync_status`` and the
    metrics. ``sync`` runs inside the run's transaction; it raises to abort the
    run (the previous snapshot stays).
    """

    name: ClassVar[str]

    @abstractmethod
    def sync(self, ctx: SyncContext) -> None:
        """Read the service and write every table this source owns."""

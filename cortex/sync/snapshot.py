"""Snapshot writes: batched upserts that count real changes, then delete what was not seen.

A source writes its whole picture of a table through :class:`SnapshotTable` inside
one transaction: rows are upserted in batches (``INSERT ... ON CONFLICT DO UPDATE
... WHERE <any column IS DISTINCT FROM the new value>``, so unchanged rows are not
rewritten and the row count says what really changed), and :meth:`SnapshotTable.finish`
deletes the rows of the table (or of its ``scope``) whose keys were not seen. If
anything fails before the commit, the transaction rolls back and the previous
snapshot stays as it was.

On PostgreSQL a batch of at least :data:`COPY_MIN_ROWS` rows travels by ``COPY`` into
a temporary table and is upserted from there in one ``INSERT ... SELECT``: the same
statement, rows and counts, about half the time of an executemany (40,000 Nova servers:
0.9 instead of 2.0 s).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    MetaData,
    Table,
    delete,
    or_,
    select,
    true,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateTable

# Rows per executemany batch are bounded by the batch size and, for very wide rows,
# by a parameter budget that keeps one batch's memory modest.
MAX_PARAMETERS = 30000
#: Batches of at least this many rows go by COPY on PostgreSQL (below, the temporary
#: table costs more than it saves).
COPY_MIN_ROWS = 100
#: ``Connection.info`` key: whether the role may create temporary tables (None: unknown).
_TEMPORARY_TABLES = "cortex_temporary_tables"
_INSUFFICIENT_PRIVILEGE = "42501"
LOG = logging.getLogger(__name__)


@dataclass
class TableCounts:
    """What one snapshot did to one table: rows seen, rows inserted or updated, rows deleted."""

    rows: int = 0
    upserted: int = 0
    deleted: int = 0

    @property
    def changed(self) -> int:
        """Rows inserted, updated or deleted."""
        return self.upserted + self.deleted


class SnapshotTable:
    """Write the full content of ``table`` (or of the rows matching ``scope``) in batches.

    ``key`` names the columns that identify a row (the primary key or a unique
    constraint); rows are dicts keyed by column name. A key seen twice keeps its
    first row. Use :meth:`add` for each batch as the source reads it, then
    :meth:`finish`. Works on PostgreSQL and SQLite.
    """

    def __init__(self, connection: Connection, table: Table | Any, key: tuple[str, ...],
                 scope: ColumnElement[bool] | None = None, batch_size: int = 1000) -> None:
        self.connection = connection
        self.table: Table = getattr(table, "__table__", table)
        self.key = key
        self.scope = scope if scope is not None else true()
        self.counts = TableCounts()
        self._existing = self._existing_keys()
        self._seen: set[tuple] = set()
        self._pending: list[dict[str, Any]] = []
        columns = len(self.table.columns)
        self._batch_size = max(1, min(batch_size, MAX_PARAMETERS // columns))

    def _existing_keys(self) -> set[tuple]:
        """Keys of the rows in scope before this snapshot."""
        columns = [self.table.c[k] for k in self.key]
        return {tuple(r) for r in self.connection.execute(select(*columns).where(self.scope))}

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Queue ``rows``; full batches are written at once."""
        for row in rows:
            key = tuple(row[k] for k in self.key)
            if key in self._seen:
                continue
            self._seen.add(key)
            self._pending.append(dict(row))
            if len(self._pending) >= self._batch_size:
                self._flush()

    def _flush(self) -> None:
        """Upsert the queued rows in one statement; count the rows really written."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        self.counts.rows += len(batch)
        self.counts.upserted += upsert(self.connection, self.table, batch, self.key)

    def finish(self) -> TableCounts:
        """Write what is queued, delete the rows in scope that were not seen; the counts."""
        self._flush()
        self._delete(self._existing - self._seen)
        return self.counts

    def keep(self, predicate) -> None:
        """Count the stored rows whose key satisfies ``predicate`` as seen, unwritten.

        For sources that re-read only what changed (Placement providers whose
        generation moved): the rest of the previous snapshot stands.
        """
        kept = {k for k in self._existing if predicate(k)} - self._seen
        self._seen |= kept
        self.counts.rows += len(kept)

    def prune_to(self, keys: set[tuple]) -> None:
        """Delete now the rows in scope whose key is not in ``keys``.

        For a snapshot whose keys are all known up front: deleting first lets a
        new row take the unique values (``host``, ``node``) a vanished row held.
        """
        self._delete(self._existing - keys)
        self._existing &= keys

    def _delete(self, keys: set[tuple]) -> None:
        """Delete the rows in scope with these keys, in batches."""
        gone = list(keys)
        for start in range(0, len(gone), self._batch_size):
            self.counts.deleted += self.connection.execute(
                delete(self.table).where(self.scope, _key_in(
                    self.table, self.key, gone[start:start + self._batch_size]))).rowcount


def replace_rows(connection: Connection, table: Table | Any, rows: Iterable[Mapping[str, Any]],
                 key: tuple[str, ...], scope: ColumnElement[bool] | None = None,
                 batch_size: int = 1000) -> TableCounts:
    """Make ``table`` (within ``scope``) hold exactly ``rows``; see :class:`SnapshotTable`."""
    snapshot = SnapshotTable(connection, table, key, scope, batch_size)
    rows = list(rows)
    snapshot.prune_to({tuple(row[k] for k in key) for row in rows})
    snapshot.add(rows)
    return snapshot.finish()


def append_rows(connection: Connection, table: Table | Any, rows: Iterable[Mapping[str, Any]],
                key: tuple[str, ...], batch_size: int = 1000) -> TableCounts:
    """Upsert ``rows`` into ``table`` in batches without deleting anything (time series)."""
    table = getattr(table, "__table__", table)
    counts = TableCounts()
    batch: dict[tuple, dict[str, Any]] = {}
    size = max(1, min(batch_size, MAX_PARAMETERS // len(table.columns)))
    for row in rows:
        batch[tuple(row[k] for k in key)] = dict(row)
        if len(batch) >= size:
            counts.rows += len(batch)
            counts.upserted += upsert(connection, table, list(batch.values()), key)
            batch = {}
    if batch:
        counts.rows += len(batch)
        counts.upserted += upsert(connection, table, list(batch.values()), key)
    return counts


def upsert(connection: Connection, table: Table, rows: list[dict[str, Any]],
           key: tuple[str, ...]) -> int:
    """``INSERT rows ON CONFLICT (key) DO UPDATE`` only where a column really differs.

    Rows must all carry the same columns; columns they leave out keep their
    server value on update. Rows whose values are unchanged are not rewritten.
    Returns the rows inserted or updated. Rows must not repeat a key. On PostgreSQL
    a batch of :data:`COPY_MIN_ROWS` or more goes by ``COPY`` (:func:`_upsert_by_copy`);
    otherwise one executemany: the statement is compiled once and psycopg (or sqlite3)
    sums the row counts, which ``preserve_rowcount`` keeps (SQLAlchemy drops an
    INSERT's count otherwise).
    """
    if not rows:
        return 0
    if connection.dialect.name == "postgresql" and len(rows) >= COPY_MIN_ROWS and not any(
            c.default is not None for c in table.columns if c.name not in rows[0]):
        staging = _staging_table(connection, table, list(rows[0]))
        if staging is not None:
            return _upsert_by_copy(connection, table, staging, rows, key)
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    statement = _on_conflict(dialect.insert(table), table, list(rows[0]), key)
    return connection.execute(statement.execution_options(preserve_rowcount=True),
                              rows).rowcount


def _on_conflict(statement: Any, table: Table, columns: list[str], key: tuple[str, ...]) -> Any:
    """``statement`` (an INSERT) updating the columns that differ on a key conflict."""
    updates = [c for c in columns if c not in key]
    if not updates:
        return statement.on_conflict_do_nothing(index_elements=list(key))
    return statement.on_conflict_do_update(
        index_elements=list(key),
        set_={c: statement.excluded[c] for c in updates},
        where=or_(*(table.c[c].is_distinct_from(statement.excluded[c]) for c in updates)))


def _staging_table(connection: Connection, table: Table, columns: list[str]) -> Table | None:
    """A temporary table of ``columns`` (the table's types) until the transaction ends.

    Created if missing (``ON COMMIT DROP``). None where the role may not create
    temporary tables (a database with ``TEMPORARY`` revoked from ``PUBLIC``): the first
    try on a connection runs in a savepoint, and a refusal is remembered for the
    connection, logged once, and the rows go by executemany.
    """
    digest = hashlib.sha1(f"{table.name}:{columns}".encode()).hexdigest()[:12]
    staging = Table(f"cortex_copy_{digest}", MetaData(),
                    *(Column(c, table.c[c].type) for c in columns),
                    prefixes=["TEMPORARY"], postgresql_on_commit="DROP")
    allowed = connection.info.get(_TEMPORARY_TABLES)
    if allowed is False:
        return None
    if allowed:
        connection.execute(CreateTable(staging, if_not_exists=True))
        return staging
    try:
        with connection.begin_nested():
            connection.execute(CreateTable(staging, if_not_exists=True))
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
            raise
        connection.info[_TEMPORARY_TABLES] = False
        LOG.warning("snapshot writes: this role may not create temporary tables (%s); "
                    "rows go by executemany instead of COPY", exc.orig)
        return None
    connection.info[_TEMPORARY_TABLES] = True
    return staging


def _upsert_by_copy(connection: Connection, table: Table, staging: Table,
                    rows: list[dict[str, Any]], key: tuple[str, ...]) -> int:
    """:func:`upsert` on PostgreSQL through ``COPY`` into ``staging``.

    Each batch is copied into the temporary table (:func:`_staging_table`), then moved
    out by ``WITH moved AS (DELETE ... RETURNING) INSERT ... SELECT ... ON CONFLICT``.
    Values pass the columns' own bind processors first (JSON columns as SQLAlchemy
    would send them). Only for tables whose rows carry every column with a Python-side
    default (:func:`upsert` checks): COPY applies none.
    """
    columns = list(rows[0])
    dialect = connection.dialect
    processors = [table.c[c].type.dialect_impl(dialect).bind_processor(dialect)
                  for c in columns]
    target = ", ".join(dialect.identifier_preparer.quote(c) for c in columns)
    with connection.connection.driver_connection.cursor() as cursor, cursor.copy(
            f"COPY {staging.name} ({target}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[c] if process is None else process(row[c])
                            for c, process in zip(columns, processors, strict=True)])
    moved = delete(staging).returning(*staging.c).cte("moved")
    statement = _on_conflict(postgresql.insert(table).from_select(
        columns, select(*(moved.c[c] for c in columns))), table, columns, key)
    return connection.execute(statement.execution_options(preserve_rowcount=True)).rowcount


def _key_in(table: Table, key: tuple[str, ...], values: list[tuple]) -> ColumnElement[bool]:
    """``key IN values`` for a one- or many-column key."""
    if len(key) == 1:
        return table.c[key[0]].in_([v[0] for v in values])
    return tuple_(*(table.c[k] for k in key)).in_(values)

"""The decision log: a bounded background writer and the queries behind /v1/decisions.

Decisions are :class:`cortex.decision.Decision`; each is stored as its table row
(:meth:`~cortex.decision.Decision.as_row`, whose ``cause`` names why a call found no
host) and read back with :meth:`~cortex.decision.Decision.from_record`.
:func:`refusals_by_cause` counts the refusals of a window by that cause.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Text,
    bindparam,
    cast,
    delete,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from cortex.db.engine import NO_WAIT_FOR_FLUSH, dumps_json
from cortex.db.models import Decision as DecisionRow
from cortex.db.models import GpuDemand
from cortex.decision import Decision, damaged_decision
from cortex.store.demand import DemandStore, demand_row

LOG = logging.getLogger(__name__)
_STOP = object()
_NOTHING = object()  # what _gather starts from when it only takes what is queued
#: Seconds between looks at the queue while the writer waits for the calls to end.
_QUIET_POLL = 0.01
#: The decision log is best effort (a full queue drops records too): its commits do not
#: wait for the WAL to reach the disk, so they do not hold the writer. A server crash
#: may lose the last ~0.6 s of decisions (3x wal_writer_delay), never a half-written one;
#: a crash of the worker, those of the writer's flush interval besides.
_NO_WAIT_FOR_FLUSH = text(NO_WAIT_FOR_FLUSH)


class DecisionWriter:
    """Writes decision records off the hot path, in batches, from one daemon thread.

    ``submit(record)`` never blocks: when ``maxsize`` records are already waiting the
    record is dropped and ``on_drop()`` is called (a metric); it is called once per
    record of a batch that could not be written, too. A batch the database refuses for
    its content (not for being down) is written again record by record, so one bad
    record (a NUL, a lone surrogate, a number PostgreSQL cannot hold) never takes its
    batch-mates with it: a refused record is written once more as :func:`storable`
    makes it, ``on_unstorable()`` is called for it (a metric) and it is logged; only if
    that is refused too is it dropped. ``on_queued(n)`` is called with 1 as a
    record is queued (-1 when the queue refused it) and ``on_handled(n)`` from the writer
    thread with the number of records of each batch taken off the queue, written or not
    (a queue-depth gauge that works across processes). ``close()`` flushes what
    is queued (graceful shutdown). With ``retention_days``, decisions older than that
    are deleted at most every ``prune_every`` seconds, after a write; with
    ``demand_retention_days``, the GPU demand rows (``gpu_demand``, written with their
    decisions in one transaction: :mod:`cortex.store.demand`) likewise. Records are
    :class:`~cortex.decision.Decision` objects with their ``id`` and ``created_at`` set.

    ``flush_interval`` (seconds, 0 by default): a record waits that long at most for the
    records after it, and they are written together (:meth:`_gather`); ``flush()`` and
    ``close()`` do not wait for it. Written one by one, each record cost the worker
    about 1 ms of CPU and PostgreSQL 0.5 ms for its transaction (at 100 hosts, where
    the record itself is 9 kB), the worker's own calls paying for both on a 2-core
    machine: one transaction per interval costs that once.

    ``quiet_wait`` (seconds): while a call is in flight in the process (:meth:`call`),
    the writer holds a gathered batch back, at most that long, and not once a full batch
    waits: its interpreter time (~2 ms for a 10,000-host record) then falls between the
    calls instead of inside them, where it held the interpreter lock a call waited for.
    """

    def __init__(self, engine: Engine, maxsize: int = 10000, batch: int = 200,
                 on_drop: Callable[[], None] = lambda: None,
                 retention_days: float | None = None, prune_every: float = 3600.0,
                 on_handled: Callable[[int], None] = lambda n: None,
                 on_unstorable: Callable[[], None] = lambda: None,
                 on_queued: Callable[[int], None] = lambda n: None,
                 demand_retention_days: float | None = None,
                 flush_interval: float = 0.0, quiet_wait: float = 0.0) -> None:
        self._engine = engine
        self._flush_interval = flush_interval
        self._quiet_wait = quiet_wait
        self._in_flight = 0
        self._quiet = threading.Condition()
        self._hurry = threading.Event()  # a flush or the close: hold nothing back
        self.holding = 0  # records gathered and held back for the calls in flight
        self._on_unstorable = on_unstorable
        self._retention_days = retention_days
        self._demand_retention_days = demand_retention_days
        self._prune_every = prune_every
        self._pruned_at = float("-inf")
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self._batch = batch
        self._on_drop = on_drop
        self._on_handled = on_handled
        self._on_queued = on_queued
        self.written = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="decision-writer", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Records waiting to be written."""
        return self._queue.qsize()

    def submit(self, record: Decision) -> bool:
        """Queue ``record``; False (and counted as dropped) when the queue is full."""
        self._on_queued(1)  # before: the writer may take it at once
        try:
            self._queue.put_nowait(record)
            return True
        except queue.Full:
            self._on_queued(-1)
            self.dropped += 1
            self._on_drop()
            return False

    @contextmanager
    def call(self) -> Iterator[None]:
        """Mark a call in flight for its block: the writer waits for the calls to end.

        See ``quiet_wait``; two lock acquisitions, nothing when ``quiet_wait`` is 0.
        """
        if not self._quiet_wait:
            yield
            return
        with self._quiet:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._quiet:
                self._in_flight -= 1
                if not self._in_flight:
                    self._quiet.notify_all()

    def _wait_for_quiet(self, gathered: int) -> None:
        """Wait, at most ``quiet_wait`` s, until no call is in flight.

        Stops early when a full batch waits (``gathered`` and those queued since) or a
        flush or the close was asked for.
        """
        deadline = time.monotonic() + self._quiet_wait
        with self._quiet:
            self.holding = gathered
            try:
                while (self._in_flight and not self._hurry.is_set()
                       and gathered + self._queue.qsize() < self._batch):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self._quiet.wait(min(left, _QUIET_POLL))
            finally:
                self.holding = 0

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every queued record was handled (written or failed)."""
        done = threading.Event()
        self._hurry.set()
        self._queue.put(done)
        done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._hurry.set()
            self._queue.put(_STOP)
            self._thread.join(timeout)

    def _run(self) -> None:
        """Take records in batches and insert each batch in one transaction."""
        while True:
            batch, markers, stop = self._gather(self._queue.get())
            if batch and self._quiet_wait and not (markers or stop) \
                    and len(batch) < self._batch:
                self._wait_for_quiet(len(batch))
                batch, markers, stop = self._gather(_NOTHING, batch, 0.0)  # and the queued
            self._write(batch)
            if batch:
                self._on_handled(len(batch))
            self._prune_if_due()
            if markers:
                self._hurry.clear()  # a later flush sets it again before its marker
            for marker in markers:
                marker.set()
            if stop:
                return

    def _gather(self, item: Any, gathered: list[Decision] | None = None,
                interval: float | None = None
                ) -> tuple[list[Decision], list[threading.Event], bool]:
        """The batch that ``item`` opens: ``(records, flush markers, whether to stop)``.

        Records arriving within ``interval`` seconds (default ``flush_interval``) of
        ``item`` join it, up to ``batch`` records, after the records ``gathered`` before.
        A flush marker or the stop ends the wait; what is queued by then is still taken.
        """
        batch = [] if gathered is None else gathered
        markers: list[threading.Event] = []
        stop = False
        deadline = time.monotonic() + (self._flush_interval if interval is None else interval)
        while True:
            if item is _NOTHING:
                pass
            elif item is _STOP:
                stop = True
            elif isinstance(item, threading.Event):
                markers.append(item)
            else:
                batch.append(item)
            if len(batch) >= self._batch:
                return batch, markers, stop
            wait = 0.0 if stop or markers else deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                return batch, markers, stop

    def _prune_if_due(self) -> None:
        """Apply the retention when it is due; errors are logged, never raised."""
        if ((self._retention_days is None and self._demand_retention_days is None)
                or time.monotonic() - self._pruned_at < self._prune_every):
            return
        self._pruned_at = time.monotonic()
        try:
            if self._retention_days is not None:
                deleted = DecisionStore(self._engine).prune(self._retention_days)
                if deleted:
                    LOG.info("pruned %d decisions older than %g days", deleted,
                             self._retention_days)
            if self._demand_retention_days is not None:
                deleted = DemandStore(self._engine).prune(self._demand_retention_days)
                if deleted:
                    LOG.info("pruned %d GPU demand rows older than %g days", deleted,
                             self._demand_retention_days)
        except SQLAlchemyError as exc:
            LOG.error("could not prune decisions: %s", type(exc).__name__)

    def _write(self, batch: list) -> None:
        """Insert ``batch``; what cannot be written is logged and counted, never raised.

        A database that is down or hung loses the batch (one error, no retries that would
        each wait for it). A batch refused for its content is written record by record
        (:meth:`_write_one`).
        """
        if not batch:
            return
        try:
            self._insert(batch)
            self.written += len(batch)
            return
        except SQLAlchemyError as exc:
            if _unreachable(exc):
                self._drop(len(batch), f"could not write {len(batch)} decisions: "
                                       f"{type(exc).__name__}")
                return
        except (TypeError, ValueError):  # a value the JSON encoder refuses
            pass
        for item in batch:
            self._write_one(item)

    def _write_one(self, item: Decision) -> None:
        """Insert one record; if refused, once more as :func:`storable` makes it."""
        try:
            self._insert([item])
            self.written += 1
            return
        except SQLAlchemyError as exc:
            if _unreachable(exc):
                self._drop(1, f"could not write decision {item.id}: "
                              f"{type(exc).__name__}")
                return
            reason = type(exc).__name__
        except (TypeError, ValueError) as exc:
            reason = type(exc).__name__
        self._on_unstorable()
        try:
            self._insert_rows([storable(item.as_row())], storable(_demand_rows([item])))
            self.written += 1
            LOG.warning("decision %s refused by the database as built (%s): stored with "
                        "NUL, lone surrogates and non-finite numbers replaced",
                        item.id, reason)
        except (SQLAlchemyError, TypeError, ValueError) as exc:
            self._drop(1, f"could not write decision {item.id} even sanitised: "
                          f"{type(exc).__name__} (first: {reason})")

    def _insert(self, batch: list[Decision]) -> None:
        """One transaction inserting the rows of ``batch`` and their GPU demand."""
        self._insert_rows([item.as_row() for item in batch], _demand_rows(batch))

    def _insert_rows(self, rows: list[dict[str, Any]], demand: list[dict[str, Any]]) -> None:
        """One transaction inserting ``rows`` of the decisions table and ``demand`` rows.

        On PostgreSQL each record goes in as the text :func:`record_text` writes (its
        ``json`` column keeps the text as sent).
        """
        with self._engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(_NO_WAIT_FOR_FLUSH)
                connection.execute(_INSERT_AS_TEXT, [
                    {k: v for k, v in row.items() if k != "record"}
                    | {"record_text": record_text(row["record"])} for row in rows])
            else:
                connection.execute(insert(DecisionRow), rows)
            if demand:
                connection.execute(insert(GpuDemand), demand)

    def _drop(self, count: int, message: str) -> None:
        """Count ``count`` records as dropped and log ``message``."""
        self.dropped += count
        for _ in range(count):
            self._on_drop()
        LOG.error("%s", message)


#: PostgreSQL: a decision row whose record is given as JSON text (``record_text``).
_INSERT_AS_TEXT = insert(DecisionRow).values(
    record=cast(bindparam("record_text", type_=Text), postgresql.JSON))


def record_text(record: dict[str, Any]) -> str:
    r"""The JSON text of a decision ``record``, as its PostgreSQL ``json`` column keeps it.

    :func:`cortex.db.engine.dumps_json`, UTF-8 only. A non-finite float becomes null
    with orjson; the standard library writes ``NaN``, which PostgreSQL refuses. NUL is
    written as ``\u0000``, which ``json`` keeps. ValueError for a lone surrogate (it
    would not read back): the writer then stores the record as :func:`storable` makes
    it, as it does any record the database refuses.
    """
    return dumps_json(record, utf8_only=True)


def _demand_rows(batch: list[Decision]) -> list[dict[str, Any]]:
    """The ``gpu_demand`` rows of the decisions of ``batch`` that carry demand."""
    return [row for row in map(demand_row, batch) if row is not None]


def _unreachable(exc: SQLAlchemyError) -> bool:
    """Whether ``exc`` says the database is down or the connection broke (not the data)."""
    return isinstance(exc, DBAPIError) and (
        exc.connection_invalidated or type(exc).__name__ in ("OperationalError",
                                                             "InterfaceError"))


#: Characters PostgreSQL cannot hold in text or jsonb: NUL and (not UTF-8) lone surrogates.
_UNSTORABLE = str.maketrans({0: "\ufffd", **{c: "\ufffd" for c in range(0xD800, 0xE000)}})


def storable(value: Any) -> Any:
    """``value`` (a decision row or record) with what PostgreSQL refuses replaced.

    In every str, keys included: NUL and lone surrogates become U+FFFD (the Unicode
    replacement character). A float that is not finite becomes None (JSON has no
    infinity); an integer beyond 64 bits becomes its decimal string. Other values are
    kept; datetimes and other column values pass through. Returns a new structure.
    """
    if isinstance(value, str):
        return value.translate(_UNSTORABLE)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if type(value) is int and value.bit_length() > 63:
        return str(value)
    return value


def _decision(row: DecisionRow) -> Decision:
    """The Decision of a ``decisions`` row: its record read with the indexed columns.

    A record that cannot be read whole (a null or odd value where a number belongs,
    lists of different lengths: written before input was checked, or by hand) gives a
    decision without its steps and weights, flagged ``damaged``
    (:func:`cortex.decision.damaged_decision`), never an error.
    """
    columns = {"id": row.id, "created_at": row.created_at, "service": row.service,
               "pipeline": row.pipeline, "request_id": row.request_id,
               "global_request_id": row.global_request_id, "resource_id": row.resource_id,
               "intent": row.intent, "outcome": row.outcome, "duration_ms": row.duration_ms,
               "cause": row.cause}
    try:
        return Decision.from_record(row.record, **columns)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        LOG.warning("decision %s: stored record unreadable (%s: %s); answered without "
                    "its steps and weights", row.id, type(exc).__name__, str(exc)[:200])
        return damaged_decision(row.record, exc, **columns)


class DecisionStore:
    """Read side of the decision log (``GET /v1/decisions``) and its retention."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, decision_id: str) -> Decision | None:
        """One decision, or None."""
        with self._engine.connect() as connection:
            row = connection.execute(
                select(DecisionRow).where(DecisionRow.id == decision_id)).first()
        return _decision(row) if row else None

    def find(self, resource_id: str | None = None, request_id: str | None = None,
             limit: int = 20, **columns: str | None) -> list[Decision]:
        """The newest ``limit`` decisions, filtered by resource id and/or request id.

        ``columns`` filters on other indexed columns by equality: ``service``,
        ``pipeline``, ``intent``, ``outcome`` (None or empty: no filter); another name
        raises TypeError.
        """
        query = select(DecisionRow).order_by(DecisionRow.created_at.desc()).limit(limit)
        if resource_id:
            query = query.where(DecisionRow.resource_id == resource_id)
        if request_id:
            query = query.where(DecisionRow.request_id == request_id)
        for name, value in columns.items():
            if name not in ("service", "pipeline", "intent", "outcome"):
                raise TypeError(f"cannot filter decisions on {name!r}")
            if value:
                query = query.where(getattr(DecisionRow, name) == value)
        with self._engine.connect() as connection:
            return [_decision(row) for row in connection.execute(query)]

    def resolve(self, key: str) -> tuple[Decision | None, int]:
        """The decision ``key`` names and how many decisions matched.

        ``key`` is tried as a decision id, then as a resource id (instance, volume or
        share: the newest of its decisions), then as the caller's request id (newest).
        Returns ``(None, 0)`` when nothing matches.
        """
        found = self.get(key)
        if found is not None:
            return found, 1
        for column in ("resource_id", "request_id"):
            matches = self.find(**{column: key}, limit=1)
            if matches:
                with self._engine.connect() as connection:
                    count = connection.execute(select(func.count()).select_from(DecisionRow).where(
                        getattr(DecisionRow, column) == key)).scalar_one()
                return matches[0], count
        return None, 0

    def prune(self, older_than_days: float) -> int:
        """Delete decisions older than the retention; returns how many were deleted."""
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        with self._engine.begin() as connection:
            return connection.execute(
                delete(DecisionRow).where(DecisionRow.created_at < cutoff)).rowcount


def refusals_by_cause(connection: Connection, since: datetime, until: datetime,
                      service: str | None = None, pipeline: str | None = None
                      ) -> list[dict[str, Any]]:
    """Calls answered with no host from ``since`` up to ``until``, counted by cause.

    ``[{"service", "pipeline", "cause", "count"}]``, most first (then by service,
    pipeline, cause); ``pipeline`` None where the call had none. A refusal is a decision
    whose ``cause`` is set (:attr:`cortex.decision.Decision.refusal`); simulations are
    left out. ``service`` and ``pipeline`` (None: all) filter them. Grouped in SQL, over
    the partial index ``ix_decisions_refusals``.
    """
    counted = func.count().label("count")
    query = (select(DecisionRow.service, DecisionRow.pipeline, DecisionRow.cause, counted)
             .where(DecisionRow.cause.is_not(None), DecisionRow.created_at >= since,
                    DecisionRow.created_at < until, DecisionRow.outcome != "simulated")
             .group_by(DecisionRow.service, DecisionRow.pipeline, DecisionRow.cause))
    if service:
        query = query.where(DecisionRow.service == service)
    if pipeline:
        query = query.where(DecisionRow.pipeline == pipeline)
    rows = [{"service": r.service, "pipeline": r.pipeline, "cause": r.cause, "count": r.count}
            for r in connection.execute(query)]
    return sorted(rows, key=lambda r: (-r["count"], r["service"], r["pipeline"] or "",
                                       r["cause"]))

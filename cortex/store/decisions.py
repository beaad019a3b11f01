"""The decision log: a bounded background writer and the queries behind /v1/decisions."""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from cortex.db.engine import NO_WAIT_FOR_FLUSH
from cortex.db.models import Decision

LOG = logging.getLogger(__name__)
_STOP = object()
#: The decision log is best effort (a full queue drops records too): its commits do not
#: wait for the WAL to reach the disk, so they do not hold the writer. A server crash
#: may lose the last ~0.6 s of decisions (3x wal_writer_delay), never a half-written one.
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
    that is refused too is it dropped. ``on_handled(n)`` is called from
    the writer thread with the number of records of each batch taken off the queue,
    written or not (a queue-depth gauge that works across processes). ``close()`` flushes what
    is queued (graceful shutdown). With ``retention_days``, decisions older than that
    are deleted at most every ``prune_every`` seconds, after a write. Records are
    dicts with the Decision columns plus ``record`` (the full JSON document).
    """

    def __init__(self, engine: Engine, maxsize: int = 10000, batch: int = 200,
                 on_drop: Callable[[], None] = lambda: None,
                 retention_days: float | None = None, prune_every: float = 3600.0,
                 on_handled: Callable[[int], None] = lambda n: None,
                 on_unstorable: Callable[[], None] = lambda: None) -> None:
        self._engine = engine
        self._on_unstorable = on_unstorable
        self._retention_days = retention_days
        self._prune_every = prune_every
        self._pruned_at = float("-inf")
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self._batch = batch
        self._on_drop = on_drop
        self._on_handled = on_handled
        self.written = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="decision-writer", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Records waiting to be written."""
        return self._queue.qsize()

    def submit(self, record: Mapping[str, Any]) -> bool:
        """Queue ``record``; False (and counted as dropped) when the queue is full."""
        try:
            self._queue.put_nowait(record)
            return True
        except queue.Full:
            self.dropped += 1
            self._on_drop()
            return False

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every queued record was handled (written or failed)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)

    def _run(self) -> None:
        """Take records in batches and insert each batch in one transaction."""
        while True:
            item = self._queue.get()
            batch, markers, stop = [], [], False
            while True:
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    markers.append(item)
                else:
                    batch.append(item)
                if len(batch) >= self._batch or self._queue.empty():
                    break
                item = self._queue.get()
            self._write(batch)
            if batch:
                self._on_handled(len(batch))
            self._prune_if_due()
            for marker in markers:
                marker.set()
            if stop:
                return

    def _prune_if_due(self) -> None:
        """Apply the retention when it is due; errors are logged, never raised."""
        if self._retention_days is None or time.monotonic() - self._pruned_at < self._prune_every:
            return
        self._pruned_at = time.monotonic()
        try:
            deleted = DecisionStore(self._engine).prune(self._retention_days)
            if deleted:
                LOG.info("pruned %d decisions older than %g days", deleted, self._retention_days)
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

    def _write_one(self, item: Mapping[str, Any]) -> None:
        """Insert one record; if refused, once more as :func:`storable` makes it."""
        try:
            self._insert([item])
            self.written += 1
            return
        except SQLAlchemyError as exc:
            if _unreachable(exc):
                self._drop(1, f"could not write decision {item.get('id')}: "
                              f"{type(exc).__name__}")
                return
            reason = type(exc).__name__
        except (TypeError, ValueError) as exc:
            reason = type(exc).__name__
        self._on_unstorable()
        try:
            self._insert([storable(item)])
            self.written += 1
            LOG.warning("decision %s refused by the database as built (%s): stored with "
                        "NUL, lone surrogates and non-finite numbers replaced",
                        item.get("id"), reason)
        except (SQLAlchemyError, TypeError, ValueError) as exc:
            self._drop(1, f"could not write decision {item.get('id')} even sanitised: "
                          f"{type(exc).__name__} (first: {reason})")

    def _insert(self, batch: list) -> None:
        """One transaction inserting ``batch`` (records compacted)."""
        rows = [item | {"record": compact_record(item["record"])} for item in batch]
        with self._engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(_NO_WAIT_FOR_FLUSH)
            connection.execute(insert(Decision), rows)

    def _drop(self, count: int, message: str) -> None:
        """Count ``count`` records as dropped and log ``message``."""
        self.dropped += count
        for _ in range(count):
            self._on_drop()
        LOG.error("%s", message)


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


#: ``record["format"]`` of a record stored by :func:`compact_record`; records without
#: it (written before it existed, or left whole) are stored as built.
COMPACT_FORMAT = 2


def compact_record(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """``record`` as stored: per-host values as lists instead of ``{host: value}`` maps.

    A 1,000-host Nova call's record names every host once per weigher, twice (``raw``
    and ``scaled``), and again in ``weights`` and ``final_weights``: about 300 kB, most
    of it host names and values that follow from others. Stored instead:

    - ``weights`` as a list in the order of ``hosts``;
    - ``weighed``: the hosts the weighers judged, in the engine's order, once; each
      weigher's ``raw`` a list in that order, without ``scaled`` (``multiplier *
      tanh(raw)``);
    - no ``final_weights``: the engine's sum (``tanh(caller weight) + sum(scaled)``,
      cortex/pipeline/engine.py) recomputed in the same order gives the same floats.

    :func:`expand_record` gives back exactly ``record``: the sum is recomputed here and
    compared with the final weights, and a record whose weights it does not give back
    (or whose weighers judged different hosts) is stored as built. Runs in the decision
    writer's thread, off the request path.

    A record the endpoint already built in this form (``format`` set: its steps from
    :meth:`cortex.pipeline.engine.StepRecord.as_stored`, its ``weighed`` the engine's
    order) only has its ``weights`` turned into a list.
    """
    steps, hosts, weights = record.get("steps"), record.get("hosts"), record.get("weights")
    if record.get("format") == COMPACT_FORMAT:
        if isinstance(hosts, list) and isinstance(weights, dict) and list(weights) == hosts:
            return {**record, "weights": list(weights.values())}
        return record
    if not steps or not isinstance(hosts, list) or not isinstance(weights, dict) \
            or "final_weights" not in record:
        return record
    weighed = next((list(s["raw"]) for s in steps if s.get("kind") == "weigher"
                    and s.get("raw")), None)
    if weighed is None:  # no weigher ran: the final weights are the caller's terms
        weighed = list(record["final_weights"] or ())
    if any(host not in weights for host in weighed):
        return record
    stored_steps = []
    for step in steps:
        raw = step.get("raw")
        if raw and list(raw) == weighed:
            step = {k: v for k, v in step.items() if k != "scaled"} | {"raw": list(raw.values())}
        elif raw:
            return record  # values of other hosts than the first weigher's: keep it whole
        stored_steps.append(step)
    if _final_weights(weighed, weights, stored_steps) != record["final_weights"]:
        return record  # the sum does not give back the final weights: keep them
    stored = {k: v for k, v in record.items() if k != "final_weights"} | {
        "format": COMPACT_FORMAT, "steps": stored_steps, "weighed": weighed}
    if list(weights) == hosts:
        stored["weights"] = list(weights.values())
    return stored


def expand_record(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The record :func:`compact_record` stored, rebuilt whole; any other record as it is."""
    if stored.get("format") != COMPACT_FORMAT:
        return dict(stored)
    record = {k: v for k, v in stored.items() if k not in ("format", "weighed")}
    hosts, weighed = stored.get("hosts") or [], stored.get("weighed") or []
    if isinstance(stored.get("weights"), list):
        record["weights"] = dict(zip(hosts, stored["weights"], strict=True))
    record["final_weights"] = _final_weights(weighed, record.get("weights") or {},
                                             stored["steps"])
    record["steps"] = [step | {
        "raw": dict(zip(weighed, step["raw"], strict=True)),
        "scaled": dict(zip(weighed, _scaled(step), strict=True))}
        if isinstance(step.get("raw"), list) else step for step in stored["steps"]]
    return record


def _scaled(step: Mapping[str, Any]) -> list[float]:
    """``multiplier * tanh(raw)`` of a stored weigher step's ``raw`` list, in its order."""
    multiplier = step.get("multiplier", 1.0)
    return [multiplier * math.tanh(value) for value in step["raw"]]


def _final_weights(weighed: list[str], weights: Mapping[str, float],
                   steps: list[Mapping[str, Any]]) -> dict[str, float]:
    """The engine's sum over stored steps: ``tanh(caller weight) + sum(scaled)`` per host.

    Added in the engine's order (cortex/pipeline/engine.py), so the floats are the same;
    hosts a filter removed after the weighers (the promise step) are left out.
    """
    sums = [math.tanh(weights[host]) for host in weighed]
    for step in steps:
        if isinstance(step.get("raw"), list) and step.get("status") == "ran":
            sums = [total + value for total, value in zip(sums, _scaled(step), strict=True)]
    gone = _removed(steps)
    return {h: total for h, total in zip(weighed, sums, strict=True) if h not in gone}


def _removed(steps: list[Mapping[str, Any]]) -> set[str]:
    """Hosts a filter step removed (not shadow): the promise step's after the weighers."""
    return {host for step in steps if step.get("kind") == "filter" and not step.get("shadow")
            for host in step.get("removed") or ()}


def _as_document(row: Decision) -> dict[str, Any]:
    """The API document of a decision row: its record plus the indexed columns.

    A record that cannot be read whole (a null or odd value where a number belongs,
    lists of different lengths: written before input was checked, or by hand) gives a
    document without its per-host parts, flagged ``damaged``
    (:func:`_damaged_document`), never an error.
    """
    try:
        document = expand_record(row.record)
        _check_numbers(document)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        LOG.warning("decision %s: stored record unreadable (%s: %s); answered without "
                    "its steps and weights", row.id, type(exc).__name__, str(exc)[:200])
        document = _damaged_document(row.record, exc)
    document.update(id=row.id, created_at=row.created_at.isoformat(), service=row.service,
                    pipeline=row.pipeline, request_id=row.request_id,
                    global_request_id=row.global_request_id, resource_id=row.resource_id,
                    intent=row.intent, outcome=row.outcome, duration_ms=row.duration_ms)
    return document


def _check_numbers(document: Mapping[str, Any]) -> None:
    """Raise TypeError unless ``weights`` and ``final_weights`` are maps of finite numbers.

    Either may be absent (a call rejected before its pipeline ran).
    """
    for key in ("weights", "final_weights"):
        values = document.get(key)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in values.values()):
            raise TypeError(f"{key} is not a map of finite numbers")


def _damaged_document(stored: Any, exc: Exception) -> dict[str, Any]:
    """What can be shown of a record that cannot be read whole.

    Keeps the record's lists of host names (``hosts``, ``result``, ``unknown_hosts``) when
    they are lists of str, and ``status``, ``detail``, ``api_request_id``,
    ``knowledge_version``; ``steps`` is empty and ``damaged`` says why.
    """
    stored = stored if isinstance(stored, Mapping) else {}
    document: dict[str, Any] = {"steps": [], "damaged": f"the stored record cannot be read "
                                f"whole ({type(exc).__name__}); steps and weights left out"}
    for key in ("hosts", "result", "unknown_hosts"):
        value = stored.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            document[key] = value
    for key in ("status", "detail", "api_request_id", "knowledge_version"):
        if isinstance(stored.get(key), (str, int)) and not isinstance(stored.get(key), bool):
            document[key] = stored[key]
    return document


class DecisionStore:
    """Read side of the decision log (``GET /v1/decisions``) and its retention."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, decision_id: str) -> dict[str, Any] | None:
        """One decision document, or None."""
        with self._engine.connect() as connection:
            row = connection.execute(select(Decision).where(Decision.id == decision_id)).first()
        return _as_document(row) if row else None

    def find(self, resource_id: str | None = None, request_id: str | None = None,
             limit: int = 20, **columns: str | None) -> list[dict[str, Any]]:
        """The newest ``limit`` decisions, filtered by resource id and/or request id.

        ``columns`` filters on other indexed columns by equality: ``service``,
        ``pipeline``, ``intent``, ``outcome`` (None or empty: no filter); another name
        raises TypeError.
        """
        query = select(Decision).order_by(Decision.created_at.desc()).limit(limit)
        if resource_id:
            query = query.where(Decision.resource_id == resource_id)
        if request_id:
            query = query.where(Decision.request_id == request_id)
        for name, value in columns.items():
            if name not in ("service", "pipeline", "intent", "outcome"):
                raise TypeError(f"cannot filter decisions on {name!r}")
            if value:
                query = query.where(getattr(Decision, name) == value)
        with self._engine.connect() as connection:
            return [_as_document(row) for row in connection.execute(query)]

    def resolve(self, key: str) -> tuple[dict[str, Any] | None, int]:
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
                    count = connection.execute(select(func.count()).select_from(Decision).where(
                        getattr(Decision, column) == key)).scalar_one()
                return matches[0], count
        return None, 0

    def prune(self, older_than_days: float) -> int:
        """Delete decisions older than the retention; returns how many were deleted."""
        cutoff = datetime.now(UTC) - timedelta(days=older_than_days)
        with self._engine.begin() as connection:
            return connection.execute(delete(Decision).where(Decision.created_at < cutoff)).rowcount

"""In-flight reservations in the database, shared by every API worker and replica.

:meth:`ReservationStore.lock_host` is the one place capacity is promised: in one
transaction it takes a lock on the host and reads the host's unexpired reservations;
the scheduler re-checks the request with them (:mod:`cortex.scheduler.promise`) and
writes the new reservation only if it still fits. On PostgreSQL the lock is a transaction-level
advisory lock on (namespace, ``hashtext(host)``): two workers promising the same host
serialise, different hosts do not wait for each other (a hash collision only makes
two hosts share a lock). The embedded SQLite default serves one process: a
process-wide lock serialises promises instead.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from psycopg.rows import namedtuple_row
from sqlalchemy import (
    Engine,
    bindparam,
    delete,
    insert,
    make_url,
    select,
    text,
)
from sqlalchemy.dialects import postgresql, sqlite

from cortex.db import models
from cortex.db.engine import (
    KEEPALIVES_ONLY,
    NO_WAIT_FOR_FLUSH,
    ConnectionLimits,
    dumps_json,
    make_engine,
)
from cortex.db.guard import BOUND_LOCK_WAITS_SQL, lock_wait_ms
from cortex.knowledge.reservations import LiveReservations, Reservation
from cortex.store.group_promises import GroupPromiseStore
from cortex.store.memory import HostLock, rehearse, reserve_if_unchanged
from cortex.store.reservation_feed import CHANNEL, ReservationFeed
from cortex.store.reservation_rows import LOCK_NAMESPACE
from cortex.store.reservation_rows import reservation_of as _reservation
from cortex.store.reservation_rows import row_of as _values

_TABLE = models.InflightReservation
# Built once: every Nova create runs them, and building a statement costs more than
# SQLAlchemy's cached compilation of it.
_ACTIVE = select(_TABLE).where(_TABLE.expires_at > bindparam("now"))
_HOST_ACTIVE = select(_TABLE).where(_TABLE.host == bindparam("host"),
                                    _TABLE.expires_at > bindparam("now"))
_LOCK = text("SELECT pg_advisory_xact_lock(:ns, hashtext(:host))")
_ANNOUNCE = text("SELECT pg_notify(:channel, :payload)")
_COLUMNS = ("id", "host", "instance_uuid", "group_id", "resources", "gpus", "created_at",
            "expires_at")


def _replace_statement(dialect: str):
    """INSERT that replaces the row of the same instance (ON CONFLICT), None if unsupported.

    PostgreSQL and SQLite both have ``INSERT ... ON CONFLICT DO UPDATE``: one statement
    instead of a DELETE and an INSERT.
    """
    module = {"postgresql": postgresql, "sqlite": sqlite}.get(dialect)
    if module is None:
        return None
    statement = module.insert(_TABLE).values({c: bindparam(c) for c in _COLUMNS})
    return statement.on_conflict_do_update(
        index_elements=[_TABLE.instance_uuid],
        set_={c: statement.excluded[c] for c in _COLUMNS if c != "instance_uuid"})


#: The call of the promise's function (migrations 0015, 0022, 0023): the reservation's
#: id when written, else NULL; its wait for the host's lock bounded to ``lock_wait_ms``.
_RESERVE_IF_UNCHANGED = (
    "SELECT cortex_reserve_if_unchanged(%(ns)s::integer, %(id)s, %(host)s, "
    "%(instance_uuid)s, %(group_id)s, %(resources)s::jsonb, %(gpus)s::jsonb, "
    "%(created_at)s, %(expires_at)s, %(now)s, %(own)s, %(expected)s::varchar[], "
    "%(lock_wait_ms)s::integer)")


def _reserved_if_unchanged(raw: Any, made: Reservation, now: datetime,
                           expected: frozenset[str], own: str | None) -> bool:
    """Call :data:`_RESERVE_IF_UNCHANGED` on psycopg connection ``raw``; True when it wrote.

    Inside a :func:`cortex.db.guard.deadline` the wait for the host's lock ends before
    the deadline (:func:`~cortex.db.guard.lock_wait_ms`): a busy host is refused by the
    server, not cut off by the watchdog, which would mark the database down.
    """
    values = _driver_values(made) | {"ns": LOCK_NAMESPACE, "now": now, "own": own,
                                     "expected": sorted(expected),
                                     "lock_wait_ms": lock_wait_ms()}
    return raw.execute(_RESERVE_IF_UNCHANGED, values).fetchone()[0] is not None


def _unpinged(url: str, connect_timeout: int, limits: ConnectionLimits | None = None) -> Engine:
    """The process's one engine for ``url`` without pool pre-ping (see ReservationStore)."""
    return _unpinged_engine(url, connect_timeout, limits)


@functools.cache
def _unpinged_engine(url: str, connect_timeout: int, limits: ConnectionLimits | None) -> Engine:
    """:func:`_unpinged`, one per argument tuple."""
    return make_engine(url, connect_timeout, limits, pool_pre_ping=False)


def _feed(url: str, connect_timeout: int,
          limits: ConnectionLimits | None = None) -> ReservationFeed:
    """The process's one reservation feed of the PostgreSQL database at ``url``."""
    return _feed_of(url, connect_timeout, limits)


@functools.cache
def _feed_of(url: str, connect_timeout: int, limits: ConnectionLimits | None) -> ReservationFeed:
    """:func:`_feed`, one per argument tuple."""
    reader = _autocommit(_unpinged(url, connect_timeout, limits))

    def announce(payload: str) -> None:
        with reader.connect() as connection:
            connection.execute(_ANNOUNCE, {"channel": CHANNEL, "payload": payload})

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    return ReservationFeed(conninfo, lambda: _read_active(reader, datetime.now(UTC)),
                           announce, connect_timeout,
                           params=(limits or KEEPALIVES_ONLY).params())


_unpinged.cache_clear = _unpinged_engine.cache_clear  # as if they were the cached ones
_feed.cache_clear = _feed_of.cache_clear


def _autocommit(engine: Engine) -> Engine:
    """``engine`` for single reads: autocommit spares BEGIN and the ROLLBACK on return."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def _read_active(reader: Engine, now: datetime) -> list[Reservation]:
    """Every reservation not expired at ``now``, read through ``reader`` (:func:`_autocommit`)."""
    with reader.connect() as connection:
        rows = connection.execute(_ACTIVE, {"now": now}).all()
    return [_reservation(row) for row in rows]


def _driver_values(reservation: Reservation) -> dict[str, Any]:
    """:func:`_values` as psycopg takes them for the compiled statements: JSON as text."""
    values = _values(reservation)
    values.update(resources=dumps_json(values["resources"]), gpus=dumps_json(values["gpus"]))
    return values


class ReservationStore:
    """Reservations in the ``inflight_reservations`` table of ``engine``'s database.

    On PostgreSQL the store keeps its own connection pool to that database, without
    the pre-ping of :func:`cortex.db.engine.make_engine`: every Nova create reads and
    promises here, and the ping is one more round trip on each (0.45 instead of 0.3 ms
    for the read, 1.1 instead of 0.8 ms for the promise, measured alone). A connection
    the server dropped then fails one call instead: the read is skipped or the answer
    goes out unpromised (logged), and the broken connection is discarded (after a
    failed read SQLAlchemy also discards the pool's older connections). The pool is
    shared by every store of the process on the same database and timeout
    (:func:`_unpinged`).

    With ``feed`` (PostgreSQL, the API workers) :meth:`active` answers from the
    process's :class:`~cortex.store.reservation_feed.ReservationFeed` while it
    listens, and reads the table otherwise.
    """

    def __init__(self, engine: Engine, connect_timeout: int = 3, feed: bool = False,
                 limits: ConnectionLimits | None = None) -> None:
        """Use ``engine``'s database.

        ``connect_timeout`` (s) and ``limits`` apply to the store's own pool and its
        feed's connection (``limits`` None: TCP keepalives only).
        """
        self._postgres = engine.dialect.name == "postgresql"
        self._feed: ReservationFeed | None = None
        if self._postgres:
            url = engine.url.render_as_string(hide_password=False)
            engine = _unpinged(url, connect_timeout, limits)
            if feed:
                self._feed = _feed(url, connect_timeout, limits)
        self._engine = engine
        self._reader = _autocommit(engine)
        self._local = threading.Lock()
        self._groups: GroupPromiseStore | None = None
        self._replace = _replace_statement(engine.dialect.name)
        if self._postgres:
            self._sql = {name: str(statement.compile(dialect=engine.dialect))
                         for name, statement in (("lock", _LOCK), ("host_active", _HOST_ACTIVE),
                                                 ("replace", self._replace))}

    @property
    def engine(self) -> Engine:
        """The store's engine (on PostgreSQL its own pool, see the class)."""
        return self._engine

    @property
    def process_lock(self) -> threading.Lock:
        """The lock that serialises promises in this process where the database has none."""
        return self._local

    def groups(self) -> GroupPromiseStore:
        """The group promises beside these reservations (the same engine), one per store."""
        if self._groups is None:
            self._groups = GroupPromiseStore(self)
        return self._groups

    def announce(self, *made: Reservation) -> None:
        """Hand reservations just committed to the process's feed (its NOTIFY comes later)."""
        if self._feed is not None:
            for reservation in made:
                self._feed.add(reservation)

    def active(self, now: datetime) -> list[Reservation]:
        """Every reservation not expired at ``now``: from the feed, else one indexed query."""
        if self._feed is not None:
            self._feed.start()
            items = self._feed.current()
            if items is not None:
                return [r for r in items if r.expires_at > now]
        return _read_active(self._reader, now)

    def live(self, now: datetime) -> list[Reservation] | LiveReservations:
        """The reservations a Nova call counts: the feed itself while it listens.

        The feed (a :class:`~cortex.knowledge.reservations.LiveReservations`) hands
        only what changed since the last call (:func:`~cortex.knowledge.reservations.
        request_view`); without it, :meth:`active`'s list.
        """
        if self._feed is not None:
            self._feed.start()
            if self._feed.listening:
                return self._feed
        return self.active(now)

    @property
    def listening(self) -> bool | None:
        """Whether :meth:`active` answers from memory now; None when the store has no feed."""
        if self._feed is None:
            return None
        return self._feed.listening

    def refresh(self, timeout: float = 5.0) -> bool:
        """Wait until the feed has applied every change committed so far; False on timeout.

        True at once without a feed or while it is not listening (the table is read).
        """
        return self._feed is None or self._feed.refresh(timeout)

    @contextmanager
    def lock_host(self, host: str, now: datetime) -> Iterator[HostLock]:
        """Hold ``host``'s lock in a transaction; yield its unexpired reservations.

        The block decides, then calls :meth:`HostLock.reserve` to write one reservation
        (one of the same instance elsewhere is replaced: Nova asked again for it), which
        commits when the block ends; a block that does not reserve, or raises, writes
        nothing. Raises SQLAlchemyError (psycopg.Error on PostgreSQL) when the database
        fails; a connection that broke is discarded.
        """
        locked = self._locked_pipelined if self._postgres else self._locked
        with locked(host, now) as held:
            yield held
        if held.made is not None and self._feed is not None:
            self._feed.add(held.made)

    @contextmanager
    def _locked(self, host: str, now: datetime) -> Iterator[HostLock]:
        """:meth:`lock_host` on SQLite: a process lock and one transaction."""
        with self._local, self._engine.begin() as connection:
            rows = connection.execute(_HOST_ACTIVE, {"host": host, "now": now}).all()

            def write(made: Reservation) -> None:
                if self._replace is not None:
                    connection.execute(self._replace, _values(made))
                    return
                if made.instance_uuid:
                    connection.execute(delete(_TABLE).where(
                        _TABLE.instance_uuid == made.instance_uuid))
                connection.execute(insert(_TABLE).values(_values(made)))

            yield HostLock(host, [_reservation(row) for row in rows], write)

    @contextmanager
    def _locked_pipelined(self, host: str, now: datetime) -> Iterator[HostLock]:
        """:meth:`lock_host` on PostgreSQL, in two round trips.

        psycopg's pipeline mode sends BEGIN, the advisory lock and the read together and
        they come back once the lock is held; :meth:`HostLock.reserve` sends the upsert
        and COMMIT; leaving without it sends ROLLBACK. The statements are SQLAlchemy's,
        compiled once (bound parameters only). Done one statement at a time through
        SQLAlchemy this took six round trips on every Nova create. The COMMIT does not
        wait for the WAL flush: a reservation is a short-lived hint that Placement's
        claim backs, and a server crash may lose the last moment's of them, not corrupt
        anything (PostgreSQL's ``synchronous_commit = off``).
        """
        with self._driver_connection() as raw, raw.pipeline() as pipeline:
            wait = lock_wait_ms()
            if wait:  # the lock refused before the deadline: see _reserved_if_unchanged
                raw.execute(BOUND_LOCK_WAITS_SQL, {"ms": wait})
            raw.execute(self._sql["lock"], {"ns": LOCK_NAMESPACE, "host": host})
            found = raw.cursor(row_factory=namedtuple_row)
            found.execute(self._sql["host_active"], {"host": host, "now": now})
            pipeline.sync()
            current = [_reservation(row) for row in found.fetchall()]

            def write(made: Reservation) -> None:
                raw.execute(NO_WAIT_FOR_FLUSH)
                raw.execute(self._sql["replace"], _driver_values(made))

            held = HostLock(host, current, write)
            yield held
            if held.made is None:
                raw.rollback()
            else:
                raw.commit()

    def reserve_if_unchanged(self, made: Reservation, now: datetime,
                             expected: frozenset[str], own: str | None) -> bool:
        """Write ``made`` under its host's lock if the host's reservations are ``expected``.

        As :func:`cortex.store.memory.reserve_if_unchanged` (the ids of ``made.host``'s
        reservations unexpired at ``now``, instance ``own``'s left out; True when
        written, False writing nothing). On PostgreSQL one statement, one round trip,
        where :meth:`lock_host` and :meth:`HostLock.reserve` need two (the read must come
        back before the caller can decide): migration 0015's ``cortex_reserve_if_unchanged``
        takes the host's lock, turns ``synchronous_commit`` off for its transaction and
        writes only if the host's rows are those; psycopg prepares the call, and the
        function's statements are planned once per session. In the app at 1,000 hosts,
        switched call by call with the same three statements sent as one simple query
        (300 calls each, 2 vCPUs): p50 1.59 -> 1.15 ms back to back, 1.88 -> 1.35 ms
        with 3 ms idle between calls. Raises as :meth:`lock_host` does.
        """
        if not self._postgres:
            return reserve_if_unchanged(self, made, now, expected, own)
        with self._driver_connection(self._reader) as raw:
            if not _reserved_if_unchanged(raw, made, now, expected, own):
                return False
        if self._feed is not None:
            self._feed.add(made)
        return True

    def rehearse(self, made: Reservation, now: datetime) -> bool:
        """Promise ``made`` as :meth:`reserve_if_unchanged` would, and roll it back.

        Nothing is written, announced or left locked. Counts on ``made.host`` having no
        other reservation; True when the write ran (the host had none), False when the
        host had some. What it is for: PL/pgSQL plans each statement of a function when
        the session first runs it, so a promise the function refused leaves its upsert
        unplanned, and a fresh worker's first real promise paid for it (1.6-1.8 ms where
        a rehearsed session's took 1.2-1.3 ms, as later ones do, all after the same idle
        wait). A worker's warm-up rehearses once, on the connection its first call then
        takes (the only one the store's pool holds by then). Not PostgreSQL: the host's
        lock is taken and released, nothing is planned. Raises as :meth:`lock_host` does.
        """
        if not self._postgres:
            return rehearse(self, made, now)
        with self._driver_connection(self._reader) as raw, \
                raw.transaction(force_rollback=True):
            return _reserved_if_unchanged(raw, made, now, frozenset(), made.instance_uuid)

    @contextmanager
    def _driver_connection(self, engine: Engine | None = None) -> Iterator[Any]:
        """A psycopg connection of the store's pool, for one transaction.

        ``engine``: the store's engine (default) or its autocommit form (``_reader``).
        On an error the transaction is rolled back, or, when the connection was lost
        (the watchdog shut it), the connection is discarded: no reset on its return.
        """
        with (engine or self._engine).connect() as connection:
            raw = connection.connection.driver_connection
            try:
                yield raw
            except BaseException:
                if not raw.closed:
                    raw.rollback()
                else:
                    connection.invalidate()
                raise

    def prune(self, now: datetime) -> int:
        """Delete the reservations expired at ``now``; how many."""
        with self._engine.begin() as connection:
            return connection.execute(delete(_TABLE).where(_TABLE.expires_at <= now)).rowcount

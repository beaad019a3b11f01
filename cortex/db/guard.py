"""Bounded database waits: a deadline per thread, a watchdog, and a breaker per database.

A PostgreSQL server whose processes hang (frozen, swapped out, a stuck storage volume)
keeps its sockets open: the kernel accepts connections and acknowledges data, so
neither TCP keepalives nor ``tcp_user_timeout`` notice, and the server's own
``statement_timeout`` cannot fire in a process that does not run. Only the client can
bound its wait. Code that must not wait longer than some time (the request path, the
knowledge checks) runs inside :func:`deadline`; on the engines of
:func:`cortex.db.engine.make_engine`, every connection checked out inside it is
watched, and when the deadline passes with the connection still checked out, the
watchdog shuts its socket down (``shutdown(SHUT_RDWR)``): the blocked call raises the
driver's OperationalError at once and the pool discards the connection. This is the
client-side read timeout every HTTP client has and libpq lacks.

The :class:`Health` of each database is a circuit breaker: a watched wait that ran out
marks the database down, and from then on the request path does not wait for it (a
checkout inside a non-probe :func:`deadline` raises :class:`DatabaseUnavailable` at
once) except for one trial call per ``retry`` seconds; a successful probe (the
knowledge check, see :mod:`cortex.knowledge.cache`) marks it up again. So a hung
database costs one request per process its budget, not every request, and no request
slot stays taken for longer than the budget.

The rule comes from the callers' contract (docs/caller-contract.md in the shared
docs): on any internal failure answer a fast non-2xx well inside the callers' 5-10 s
timeouts, never a slow answer.

Outside :func:`deadline` nothing changes: the CLI, the sync and the decision writer
wait as before (bounded by the server-side ``statement_timeout`` and the TCP
keepalives the engine sets).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError

LOG = logging.getLogger(__name__)

#: Seconds a database stays "down" for the request path before one call may try it
#: again (the knowledge check probes it meanwhile and usually brings it back sooner).
RETRY_DOWN = 1.0


class DatabaseUnavailable(SQLAlchemyError):
    """The database was not asked: it is marked down, or the deadline had passed."""


@dataclass(frozen=True)
class _Scope:
    """The current thread's deadline (``time.monotonic()`` seconds) and whether it probes."""

    until: float
    probe: bool


_local = threading.local()


@contextmanager
def deadline(seconds: float, probe: bool = False, detach: bool = False) -> Iterator[None]:
    """Bound the database waits of the block to ``seconds`` from now (this thread only).

    Nested blocks take the earlier deadline, unless ``detach`` (the block gets its own
    ``seconds`` whatever the outer one says: a view load that must finish). ``probe``:
    the block asks the database even while its :class:`Health` says down (it is the
    check that finds out whether it is back). ``seconds`` <= 0: any checkout raises
    DatabaseUnavailable.
    """
    outer = enter(seconds, probe, detach)
    try:
        yield
    finally:
        leave(outer)


def enter(seconds: float, probe: bool = False, detach: bool = False) -> object:
    """Start a :func:`deadline` without a ``with`` block (a request's before/teardown hooks).

    Returns the token :func:`leave` takes to restore the outer deadline.
    """
    outer: _Scope | None = getattr(_local, "scope", None)
    until = time.monotonic() + seconds
    if outer is not None and not detach:
        until = min(until, outer.until)
    _local.scope = _Scope(until, probe)
    _local.admitted = False
    return outer


def leave(token: object) -> None:
    """End the deadline :func:`enter` started (``token``: what it returned)."""
    _local.scope = token


def remaining() -> float | None:
    """Seconds left of this thread's :func:`deadline` (may be negative); None outside one."""
    scope: _Scope | None = getattr(_local, "scope", None)
    return None if scope is None else scope.until - time.monotonic()


#: Share of a deadline's time left that the lock waits of a transaction begun inside it
#: may take (:func:`bound_lock_waits`).
LOCK_SHARE = 0.8

#: This transaction's ``lock_timeout``: ``%(ms)s`` milliseconds, or the connection's own
#: when that is shorter (psycopg's parameter style; :func:`bound_lock_waits` sends it).
BOUND_LOCK_WAITS_SQL = (
    "SELECT set_config('lock_timeout', CAST(CASE WHEN s.ms > 0 THEN LEAST(s.ms, %(ms)s) "
    "ELSE %(ms)s END AS bigint) || 'ms', true) FROM (SELECT EXTRACT(EPOCH FROM "
    "CAST(current_setting('lock_timeout') AS interval)) * 1000 AS ms) AS s")
_BOUND_LOCK_WAITS = text(BOUND_LOCK_WAITS_SQL.replace("%(ms)s", ":ms"))


def lock_wait_ms() -> int:
    """Milliseconds the next lock wait may take: :data:`LOCK_SHARE` of this thread's time left.

    At least 1 inside a :func:`deadline` (even one already past); 0 outside one (no bound
    but the connection's own ``lock_timeout``).
    """
    left = remaining()
    return 0 if left is None else max(1, int(left * LOCK_SHARE * 1000))


def bound_lock_waits(connection: Connection) -> None:
    """Inside a :func:`deadline`: end ``connection``'s next lock wait before the deadline does.

    Sets the open transaction's PostgreSQL ``lock_timeout`` to :data:`LOCK_SHARE` of the
    time left (or keeps the connection's own, when shorter), so that a lock another
    transaction holds too long is refused by the server (SQLSTATE 55P03, psycopg's
    ``LockNotAvailable``) while the watchdog still waits: contention ends as one call's
    error, and never as a shut socket that marks the whole database down for every
    call of the process. PostgreSQL bounds each lock wait alone: call it before each
    lock of a transaction that takes several. Outside a deadline, or on another
    database: nothing.
    """
    wait = lock_wait_ms()
    if not wait or connection.dialect.name != "postgresql":
        return
    connection.execute(_BOUND_LOCK_WAITS, {"ms": wait})


class Health:
    """Whether one database answers, as the last watched waits and probes found.

    ``retry``: seconds after a failure during which the request path does not ask
    (:meth:`admit`), then one trial call is let through per ``retry`` seconds.
    ``clock``: a monotonic clock in seconds (tests move one).
    """

    def __init__(self, retry: float = RETRY_DOWN,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.retry = retry
        self._clock = clock
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self.reason: str | None = None
        self._next_trial = 0.0

    @property
    def down(self) -> bool:
        """Whether the last watched wait or probe failed."""
        return self.down_since is not None

    def mark_down(self, reason: str) -> None:
        """Record a failure (a wait that ran out, a probe that failed)."""
        with self._lock:
            now = self._clock()
            if self.down_since is None:
                self.down_since = now
                LOG.warning("database marked down: %s; the request path stops waiting for it",
                            reason)
            self.reason = reason
            self._next_trial = now + self.retry

    def mark_up(self) -> None:
        """Record a success: the request path uses the database again."""
        if self.down_since is None:
            return
        with self._lock:
            if self.down_since is not None:
                LOG.warning("database answers again after %.1f s",
                            self._clock() - self.down_since)
            self.down_since, self.reason = None, None

    def admit(self) -> bool:
        """Whether a request-path call may ask now: always while up; once per ``retry`` else."""
        if self.down_since is None:
            return True
        with self._lock:
            now = self._clock()
            if now < self._next_trial:
                return False
            self._next_trial = now + self.retry
            return True


_HEALTH: dict[str, Health] = {}
_HEALTH_LOCK = threading.Lock()


def health(engine: Engine) -> Health:
    """The process's :class:`Health` of ``engine``'s database (shared by every engine on it)."""
    key = engine.url.set(password=None).render_as_string()
    with _HEALTH_LOCK:
        return _HEALTH.setdefault(key, Health())


class _Watch:
    """One checked-out connection's deadline: fires at most once, never after disarm."""

    __slots__ = ("until", "fd", "on_fire", "lock", "state")

    def __init__(self, until: float, fd: int, on_fire: Callable[[], None]) -> None:
        self.until, self.fd, self.on_fire = until, fd, on_fire
        self.lock = threading.Lock()
        self.state = "armed"

    def disarm(self) -> bool:
        """Stop watching; whether the watch had fired (the connection's socket is shut)."""
        with self.lock:
            fired = self.state == "fired"
            self.state = "done"
            return fired

    def fire(self) -> None:
        """Shut the socket down if still armed (under the lock: the fd is still this one's)."""
        with self.lock:
            if self.state != "armed":
                return
            self.state = "fired"
            try:
                duplicate = socket.socket(fileno=os.dup(self.fd))
                try:
                    duplicate.shutdown(socket.SHUT_RDWR)
                finally:
                    duplicate.close()
            except OSError as exc:
                LOG.debug("watchdog: socket %d already gone (%s)", self.fd, exc)
        self.on_fire()


class _Watchdog:
    """One thread per process that fires the watches whose deadline passed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._count = itertools.count()
        self._pid: int | None = None

    def watch(self, until: float, fd: int, on_fire: Callable[[], None]) -> _Watch:
        """Start watching ``fd`` until ``until`` (``time.monotonic()``)."""
        watch = _Watch(until, fd, on_fire)
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread yet
                self._pid, self._heap = os.getpid(), []
                threading.Thread(target=self._run, name="cortex-db-watchdog",
                                 daemon=True).start()
            earliest = self._heap[0][0] if self._heap else math.inf
            heapq.heappush(self._heap, (until, next(self._count), watch))
            if until < earliest:
                self._cond.notify()
        return watch

    def _run(self) -> None:
        """Fire due watches; drop disarmed ones; sleep until the earliest deadline."""
        while True:
            due: list[_Watch] = []
            with self._cond:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now
                                      or self._heap[0][2].state != "armed"):
                    watch = heapq.heappop(self._heap)[2]
                    if watch.state == "armed":
                        due.append(watch)
                if not due:
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            for watch in due:
                try:
                    watch.fire()
                except Exception:  # noqa: BLE001 - the watchdog must outlive any failure
                    LOG.exception("watchdog: firing failed")


WATCHDOG = _Watchdog()


class _Connector:
    """Opens connections on helper threads, so that a caller waits only its deadline.

    psycopg waits at least 2 s for a connection (libpq's rule for ``connect_timeout``)
    and a connection being opened has no socket the watchdog could shut: inside a
    :func:`deadline` the connect runs on one of :data:`CONNECT_THREADS` threads and the
    caller waits for it until its deadline; one still running then is closed when it
    completes, and the database is marked down.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None

    def connect(self, dialect: Any, cargs: Any, cparams: dict, state: Health) -> Any:
        """A new DBAPI connection of ``dialect``, or DatabaseUnavailable at the deadline."""
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: no threads yet
                self._pid = os.getpid()
                self._pool = ThreadPoolExecutor(CONNECT_THREADS,
                                                thread_name_prefix="cortex-db-connect")
            future = self._pool.submit(dialect.connect, *cargs, **cparams)
        try:
            return future.result(timeout=max(remaining() or 0.0, 0.0))
        except FutureTimeout:
            future.add_done_callback(_close_late)
            state.mark_down("no connection within the time allowed")
            raise DatabaseUnavailable("no connection within the time allowed") from None


#: Threads per process that open connections for callers inside a deadline.
CONNECT_THREADS = 4


def _close_late(future: Future) -> None:
    """Close a connection whose caller gave up waiting for it."""
    if not future.cancelled() and future.exception() is None:
        try:
            future.result().close()
        except Exception:  # noqa: BLE001 - nothing to do about it
            pass


CONNECTOR = _Connector()
_WATCH_KEY = "cortex.watch"


def guard_engine(engine: Engine, ping: bool = True) -> None:
    """Watch ``engine``'s PostgreSQL connections inside :func:`deadline` blocks.

    Installs pool listeners: at checkout, inside a deadline, a database marked down
    (and not due for a trial) or a deadline already passed raises DatabaseUnavailable;
    else the connection's socket is watched until checkin, and ``ping`` checks it
    first (``pool_pre_ping``, which SQLAlchemy would run before any listener, unwatched).
    New connections inside a deadline are opened by :data:`CONNECTOR`, waited for
    until the deadline only.
    """
    state = health(engine)

    @event.listens_for(engine, "do_connect")
    def _connect(dialect, _record, cargs, cparams) -> Any:
        _admit(state)
        if remaining() is None:
            return None  # SQLAlchemy connects as usual
        _local.admitted = True  # this new connection's checkout follows: no second trial
        return CONNECTOR.connect(dialect, cargs, cparams, state)

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection, record, _proxy) -> None:
        scope: _Scope | None = getattr(_local, "scope", None)
        if scope is not None:
            if not getattr(_local, "admitted", False):
                _admit(state)
            _local.admitted = False
            record.info[_WATCH_KEY] = WATCHDOG.watch(
                scope.until, dbapi_connection.pgconn.socket,
                lambda: state.mark_down("no answer within the time allowed"))
        if ping:
            try:
                engine.dialect.do_ping(dbapi_connection)
            except Exception as exc:
                watch = record.info.pop(_WATCH_KEY, None)
                if watch is not None and watch.disarm():
                    raise DatabaseUnavailable("database did not answer the ping in time") \
                        from exc
                raise DisconnectionError(f"ping failed: {type(exc).__name__}") from exc

    def _release(_dbapi_connection, record, *_args) -> None:
        watch = record.info.pop(_WATCH_KEY, None)
        if watch is not None:
            watch.disarm()

    event.listen(engine, "checkin", _release)
    event.listen(engine, "invalidate", _release)
    event.listen(engine, "soft_invalidate", _release)


def _admit(state: Health) -> None:
    """Raise DatabaseUnavailable when the current deadline forbids asking the database."""
    scope: _Scope | None = getattr(_local, "scope", None)
    if scope is None:
        return
    if time.monotonic() >= scope.until:
        raise DatabaseUnavailable("no time left to ask the database")
    if not scope.probe and not state.admit():
        raise DatabaseUnavailable(f"database unreachable ({state.reason}); not waiting for it")

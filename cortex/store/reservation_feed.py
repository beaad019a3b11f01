"""Each API worker's in-memory copy of the in-flight reservations, kept fresh by NOTIFY.

Every Nova call lays the unexpired reservations over the knowledge view. Reading them
from PostgreSQL on every call costs a round trip and the conversion of every row,
however few changed. A :class:`ReservationFeed` holds them in memory instead: one
thread per process ``LISTEN``s on ``cortex_reservations``, where every row written or
deleted is announced with the row itself, whoever writes it: a promise of any worker by
its own function, anything else (``cortex-manage reservations prune``, an operator's SQL)
by the table's statement-level triggers (migration 0022).
The thread loads the table once, then applies the announced changes in commit order;
it loads the table again only when asked to (``TRUNCATE``, a row too large to
announce). The worker's own promises go into its copy at once.

Besides the whole list (:meth:`ReservationFeed.current`) the feed answers what changed
(:meth:`ReservationFeed.changes`): it counts its changes, logs the host of each, keeps
every host's reservations and the reservations sorted by expiry, so that a Nova call's
overlay (:func:`cortex.knowledge.reservations.request_view`) looks again only at the
hosts changed or expired since the last call, whatever the number of live ones.

What a call may miss: a reservation another worker committed in the last moment,
before this worker's listener applied it (well under a millisecond on one machine,
more when the worker is busy). The ranking may then favour a host whose room was just
promised elsewhere; the promise itself re-checks the host under its lock against the
table (:mod:`cortex.scheduler.promise`), so capacity is still never promised
twice. This is the Kubernetes scheduler's informer cache, applied to reservations.

While the listener has no connection (starting, the server gone, a database without
the trigger), :meth:`ReservationFeed.current` answers None and the store reads the
table as before.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import psycopg

from cortex.knowledge.reservations import Changes, Reservation

LOG = logging.getLogger(__name__)

#: The channel the table's changes are announced on, and its insert trigger's name.
CHANNEL = "cortex_reservations"
TRIGGER = "inflight_reservations_notify"
#: How the listening connection shows in ``pg_stat_activity``.
APPLICATION_NAME = "cortex-reservation-feed"
_TRIGGER = f"SELECT 1 FROM pg_trigger WHERE tgname = '{TRIGGER}'"
#: Seconds between looks for the trigger in a database not yet upgraded.
_NO_TRIGGER_RETRY = 60.0
#: Seconds between sweeps of expired reservations out of memory.
_SWEEP_EVERY = 5.0
#: Changes kept in the log for :meth:`ReservationFeed.changes` (older ones: whole copy).
_LOG_KEPT = 4096


class ReservationFeed:
    """The unexpired reservations of one database, in this process, changed on NOTIFY.

    ``conninfo`` is a libpq connection string for the listening connection;
    ``load()`` reads every unexpired reservation from the table; ``announce(payload)``
    sends a notification on :data:`CHANNEL` (:meth:`refresh` uses it to mark a point
    in the stream of changes). The listener thread starts with the first
    :meth:`start`, again in a forked child (gunicorn workers), and reconnects
    ``retry`` seconds after losing its connection. ``params``: more libpq
    parameters for the listening connection (TCP keepalives and ``tcp_user_timeout``,
    so that a server gone without a word is noticed and the store reads the table
    instead: :meth:`cortex.db.engine.ConnectionLimits.params`). ``clock()``: the
    time, timezone-aware, against which expired reservations are swept out of memory
    (default: the wall clock).
    """

    def __init__(self, conninfo: str, load: Callable[[], list[Reservation]],
                 announce: Callable[[str], None], connect_timeout: int = 3,
                 retry: float = 1.0, params: dict[str, Any] | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._conninfo = conninfo
        self._clock = clock
        self._params = dict(params or {})
        self._load = load
        self._announce = announce
        self._connect_timeout = connect_timeout
        self._retry = retry
        self._lock = threading.Lock()
        self._by_id: dict[str, Reservation] = {}
        self._by_instance: dict[str, str] = {}
        self._known: dict[str, datetime] = {}  # ids the stream announced, until they expire
        self._items: list[Reservation] | None = None  # None: not listening, read the table
        self._listing: list[Reservation] | None = None  # _items, made when first asked
        self._on_host: dict[str, dict[str, Reservation]] = {}
        self._expiries: list[tuple[datetime, str, str]] = []  # (expires_at, id, host), sorted
        self._log: list[str] = []  # the host of each change, the last _LOG_KEPT
        self._version = 0  # changes made since the feed began; _log ends with the last
        self._marks: dict[str, threading.Event] = {}
        self._swept = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def start(self) -> None:
        """Start the listener thread in this process if it does not run (cheap when it does)."""
        if self._pid == os.getpid() and self._thread is not None:
            return
        with self._lock:
            if self._pid == os.getpid() and self._thread is not None:
                return
            self._pid, self._items = os.getpid(), None
            self._thread = threading.Thread(target=self._run, name="reservation-feed",
                                            daemon=True)
            self._thread.start()
            _STARTED.add(self)

    def current(self) -> list[Reservation] | None:
        """The reservations as the stream of changes left them; None when not listening.

        The list may hold reservations expired since the last sweep (the caller filters
        by time); it is never changed in place, so a caller may keep it.
        """
        if self._pid != os.getpid():
            return None
        with self._lock:
            if self._items is not None and self._listing is None:
                self._listing = list(self._by_id.values())
            return None if self._items is None else self._listing

    @property
    def listening(self) -> bool:
        """Whether the feed answers from memory now (:meth:`current` not None)."""
        return self._pid == os.getpid() and self._items is not None

    def changes(self, since: int | None, start: datetime, end: datetime,
                instances: Iterable[str] = ()) -> Changes | None:
        """What a caller that saw change ``since`` must look at again; None when not listening.

        The :class:`~cortex.knowledge.reservations.Changes` at the feed's change count
        now: every host's reservations (``since`` None or older than the log kept) or
        those of the hosts changed since ``since``, of the hosts of a reservation
        expiring in ``(start, end]`` (``start`` after ``end``: ``(end, start]``) and of
        the hosts of ``instances``' reservations. Costs what changed, not what is live.
        """
        if self._pid != os.getpid():
            return None
        low, high = min(start, end), max(start, end)
        with self._lock:
            if self._items is None:
                return None
            first = self._version - len(self._log)
            if since is None or since < first or since > self._version:
                return Changes(self._version, True, {
                    h: tuple(on.values()) for h, on in self._on_host.items()})
            hosts = set(self._log[since - first:])
            at = bisect.bisect_right(self._expiries, (low, "\uffff"))
            while at < len(self._expiries) and self._expiries[at][0] <= high:
                hosts.add(self._expiries[at][2])
                at += 1
            for instance in instances:
                held = self._by_id.get(self._by_instance.get(instance, ""))
                if held is not None:
                    hosts.add(held.host)
            empty: dict[str, Reservation] = {}
            return Changes(self._version, False, {
                h: tuple(self._on_host.get(h, empty).values()) for h in hosts})

    def add(self, reservation: Reservation) -> None:
        """Count a reservation this process just committed, before its NOTIFY comes back.

        It replaces one of the same instance, as the table's upsert does. Nothing
        happens when the stream already announced this reservation (it is then counted,
        or was replaced or deleted since: adding it again would undo that).
        """
        with self._lock:
            if self._items is None or reservation.id in self._known:
                return
            self._put(reservation)
            self._publish()

    def refresh(self, timeout: float = 5.0) -> bool:
        """Wait until every change committed before this call is applied; False if not.

        Sends a mark through the same channel: notifications arrive in commit order,
        so once the listener meets the mark it has applied everything before it.
        Answers True at once when the feed is not listening (the table is read then).
        """
        if self.current() is None:
            return True
        token, seen = uuid.uuid4().hex, threading.Event()
        with self._lock:
            self._marks[token] = seen
        try:
            self._announce(json.dumps({"op": "mark", "token": token}))
            return seen.wait(timeout)
        finally:
            with self._lock:
                self._marks.pop(token, None)

    def stop(self, timeout: float = 0.0) -> None:
        """Stop listening (tests, shutdown); :meth:`current` answers None from then on.

        ``timeout``: seconds to wait for the listener thread to end (0: do not wait).
        """
        self._stop.set()
        with self._lock:
            self._items = None
        thread = self._thread
        if timeout and thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        """Listen, load, and apply every announced change; reconnect after a failure."""
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True,
                                     connect_timeout=self._connect_timeout,
                                     application_name=APPLICATION_NAME,
                                     **self._params) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    if connection.execute(_TRIGGER).fetchone() is None:
                        LOG.warning("reservation feed: no trigger %s (run 'cortex-manage "
                                    "db upgrade'); reading the table on every call", TRIGGER)
                        self._stop.wait(_NO_TRIGGER_RETRY)
                        continue
                    self._reload()
                    LOG.info("reservation feed: listening on %s", CHANNEL)
                    while not self._stop.is_set():
                        first = [n.payload for n in connection.notifies(timeout=1.0,
                                                                        stop_after=1)]
                        if first:  # and whatever came with it, applied together
                            first += [n.payload for n in connection.notifies(timeout=0.0)]
                        self._apply(first)
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any failure
                with self._lock:
                    self._items = None
                LOG.warning("reservation feed: %s; reading the table until it is back",
                            type(exc).__name__)
                self._stop.wait(self._retry)

    def _reload(self) -> None:
        """Replace the copy with the table as read now (listener thread only)."""
        items = self._load()
        with self._lock:
            self._by_id, self._by_instance = {}, {}
            self._on_host, self._expiries, self._log = {}, [], []
            self._version += 1
            for reservation in items:
                self._put(reservation)
                self._known[reservation.id] = reservation.expires_at
            self._publish()

    def _apply(self, payloads: list[str]) -> None:
        """Apply announced changes in order (listener thread only); sweep now and then.

        A payload is ``{"op": "insert"|"update"|"delete", "old": id | null,
        "old_expires_at": iso | null, "row": {column: value} | null}``, or ``{"op":
        "reload"}``, or a :meth:`refresh` mark.
        """
        reload, marks = False, []
        with self._lock:
            for payload in payloads:
                change = json.loads(payload)
                if change.get("op") == "reload":
                    reload = True
                elif change.get("op") == "mark":
                    marks.append(change.get("token"))
                else:
                    if change.get("old"):
                        self._drop(change["old"])
                        self._known[change["old"]] = _time(change["old_expires_at"])
                    if change.get("row"):
                        reservation = _reservation(change["row"])
                        self._put(reservation)
                        self._known[reservation.id] = reservation.expires_at
            if not reload:
                self._publish()
        if reload:
            self._reload()
        with self._lock:
            for token in marks:
                if token in self._marks:
                    self._marks[token].set()

    def _put(self, reservation: Reservation) -> None:
        """Count ``reservation``, replacing the same id and the same instance (lock held)."""
        self._drop(reservation.id)
        if reservation.instance_uuid:
            earlier = self._by_instance.get(reservation.instance_uuid)
            if earlier is not None:
                self._drop(earlier)
            self._by_instance[reservation.instance_uuid] = reservation.id
        self._by_id[reservation.id] = reservation
        self._on_host.setdefault(reservation.host, {})[reservation.id] = reservation
        bisect.insort(self._expiries, (reservation.expires_at, reservation.id, reservation.host))
        self._changed(reservation.host)

    def _drop(self, reservation_id: str) -> None:
        """Stop counting a reservation (lock held)."""
        gone = self._by_id.pop(reservation_id, None)
        if gone is None:
            return
        if gone.instance_uuid and self._by_instance.get(gone.instance_uuid) == reservation_id:
            del self._by_instance[gone.instance_uuid]
        on = self._on_host.get(gone.host, {})
        on.pop(reservation_id, None)
        if not on:
            self._on_host.pop(gone.host, None)
        entry = (gone.expires_at, gone.id, gone.host)
        at = bisect.bisect_left(self._expiries, entry)
        if at < len(self._expiries) and self._expiries[at] == entry:
            del self._expiries[at]
        self._changed(gone.host)

    def _changed(self, host: str) -> None:
        """Count one change on ``host`` in the log :meth:`changes` reads (lock held)."""
        self._version += 1
        self._log.append(host)
        if len(self._log) > 2 * _LOG_KEPT:
            del self._log[:-_LOG_KEPT]

    def _publish(self) -> None:
        """Make the copy what :meth:`current` answers; sweep expired entries (lock held)."""
        if time.monotonic() - self._swept > _SWEEP_EVERY:
            self._swept, now = time.monotonic(), self._clock()
            for reservation_id in [i for i, r in self._by_id.items() if r.expires_at <= now]:
                self._drop(reservation_id)
            self._known = {i: t for i, t in self._known.items() if t > now}
        # once stopped, never live again: a change applied as stop() ran must not undo it
        # the list itself is made when first asked for (:meth:`current`)
        self._items = None if self._stop.is_set() else []
        self._listing = None


def _time(value: str) -> datetime:
    """A timestamp as PostgreSQL's JSON writes it (ISO 8601), timezone-aware."""
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _reservation(row: dict) -> Reservation:
    """The Reservation of an announced ``inflight_reservations`` row (``row_to_json``)."""
    return Reservation(row["id"], row["host"], row.get("instance_uuid"), row.get("group_id"),
                       MappingProxyType({k: int(v) for k, v in (row.get("resources") or {})
                                         .items()}),
                       tuple(row.get("gpus") or ()), _time(row["created_at"]),
                       _time(row["expires_at"]))


#: The feeds whose listener thread this process started (weakly: a dropped feed goes).
_STARTED: weakref.WeakSet[ReservationFeed] = weakref.WeakSet()


def stop_all(timeout: float = 5.0) -> None:
    """Stop every feed this process started and wait up to ``timeout`` s for each thread.

    For shutdown and for a test session that drops its database: a listener left
    running would reconnect to a database that no longer exists, once a second.
    """
    for feed in list(_STARTED):
        feed.stop(timeout)

"""Per-worker cache of the knowledge view, rebuilt only when the version moves."""

from __future__ import annotations

import gc
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError

from cortex.db import guard
from cortex.knowledge.loader import load_view, read_version
from cortex.knowledge.network import MetadataKeys
from cortex.knowledge.view import KnowledgeView

LOG = logging.getLogger(__name__)
#: Default longest pause between checks while the database fails ([database]
#: max_retry_interval): the API is back at most this long after the database is.
MAX_BACKOFF = 1.0
#: Seconds a view load may take before the watchdog gives up on it (~2 s at 10,000 hosts).
LOAD_TIMEOUT = 60.0
#: Shortest real pause of the background checker between two checks of its own.
MIN_PAUSE = 0.5


class KnowledgeUnavailable(RuntimeError):
    """No usable knowledge view; the message says why (answered with 503)."""


def unreachable(exc: SQLAlchemyError) -> bool:
    """Whether ``exc`` says the database did not answer, rather than refused what was read.

    Connection and server-side timeout errors (OperationalError, InterfaceError, a
    connection the pool invalidated, :class:`cortex.db.guard.DatabaseUnavailable`) are
    the database being away; a DataError, ProgrammingError or IntegrityError is a
    database that answered.
    """
    if isinstance(exc, guard.DatabaseUnavailable | OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


class KnowledgeCache:
    """Holds the current KnowledgeView; checks the version every ``interval`` s.

    ``view()`` is cheap on the hot path: a clock read and, in the foreground mode, at
    most once per interval one ``SELECT version``; the full reload runs only when the
    version changed, and only one thread refreshes at a time (the others keep serving
    the current view). When the database fails, the last good view keeps serving and
    ``last_error`` says why; checks then back off exponentially from ``interval``, up
    to ``max_retry`` seconds with jitter (``jitter()`` in [0, 1) takes up to half of
    the pause off, so workers do not probe in step), so the API is back at most
    ``max_retry`` s after the database. Once the last successful check is older than
    ``max_age`` seconds (0: never), or when there is no view at all, ``view()`` raises
    KnowledgeUnavailable. Recovery needs nothing: the next successful check clears it.

    Every check is a probe of the database (:mod:`cortex.db.guard`): it waits at most
    ``check_timeout`` s for the version (less inside a shorter request deadline), a
    view load at most :data:`LOAD_TIMEOUT`; a success marks the database up for the
    request path, a failure marks it down.

    ``kubernetes_nodes``: report-only hosts join the view as Kubernetes nodes;
    ``request_sizes``: the view counts the recorded GPU creates' sizes
    (:func:`cortex.knowledge.loader.load_view`); ``on_skipped(table, rows)`` is called
    for each table with rows a load left out (the API's
    ``cortex_knowledge_rows_skipped_total``).

    A database that answers but whose knowledge cannot be read (a DataError, or a
    reader's error on a row the loader does not guard) is not a database that is
    down: the last view keeps serving, ``last_error`` says "knowledge unreadable", the
    database is not marked down for the request path, and checks back off as for an
    outage.

    ``background``: a daemon thread per worker process checks the version on its own
    schedule (every ``interval`` s, at least every :data:`MIN_PAUSE` s apart), with or
    without requests, so the knowledge age counts from the database and not from
    traffic: a healthy database never ages the view past ``max_age``, however quiet
    the night. A request that finds a check due wakes the thread and goes on with the
    current view, so no request waits for a reload (0.15 s at 1,000 hosts, ~2 s at
    10,000). A cold cache waits for the thread's first load, within the request's
    deadline. The thread holds the cache only weakly and ends when it is gone or
    :meth:`close` is called.
    """

    def __init__(self, engine: Engine, interval: float = 1.0, max_age: float = 0.0,
                 clock: Callable[[], float] = time.monotonic,
                 network_keys: MetadataKeys | None = None, background: bool = False,
                 check_timeout: float = 2.0, max_retry: float = MAX_BACKOFF,
                 jitter: Callable[[], float] = random.random,
                 kubernetes_nodes: bool = False, request_sizes: bool = False,
                 on_skipped: Callable[[str, int], None] | None = None) -> None:
        self._engine = engine
        self._on_skipped = on_skipped
        self._kubernetes_nodes = kubernetes_nodes
        self._request_sizes = request_sizes
        self._health = guard.health(engine) if isinstance(engine, Engine) else guard.Health()
        self._background = background
        self._network_keys = network_keys
        self._interval = interval
        self._max_age = max_age
        self._clock = clock
        self._check_timeout = check_timeout
        self._max_retry = max_retry
        self._jitter = jitter
        self._lock = threading.Lock()
        self._view: KnowledgeView | None = None
        self._next_check = float("-inf")
        self._failures = 0
        self._retry_in: float | None = None  # the back-off after the last failure (s)
        self.checked_at: float | None = None
        self.last_error: str | None = None
        # the background checker: its thread, its wake-up call, and its progress
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._progress = threading.Condition()
        self._asked = self._done = 0
        self._checking = False
        self._thread: threading.Thread | None = None
        self._thread_pid: int | None = None

    def start(self) -> None:
        """Start the background checker now (a worker's start), not at the first view().

        So that the knowledge of a worker that serves nothing for a while (a demo left
        idle, a quiet night) stays young. Nothing in the foreground mode.
        """
        if self._background:
            self._ensure_checker()

    def view(self) -> KnowledgeView:
        """The current view, refreshed if due; KnowledgeUnavailable if none is usable.

        In the background mode a view older than ``max_age`` whose database is not
        known to be down (the checker was not running, or the process was suspended)
        waits, within the caller's deadline, for the check it asks for.
        """
        if self._background:
            self._ensure_checker()
            if self._view is None:
                self._ask_check()
                self._wait_first_load()
            elif self._clock() >= self._next_check:
                self._ask_check()
                if not self._failures and self._too_old():
                    left = guard.remaining()
                    self.wait_for_refresh(self._check_timeout if left is None
                                          else max(left, 0))
        elif self._clock() >= self._next_check:
            self.refresh()
        problem = self.problem()
        if problem:
            raise KnowledgeUnavailable(problem)
        return self._view

    @property
    def current(self) -> KnowledgeView | None:
        """The last loaded view, usable or not, without any check (metrics, dashboard)."""
        return self._view

    @property
    def max_age(self) -> float:
        """``max_age`` (s; 0: no limit): older knowledge is not served."""
        return self._max_age

    @property
    def database_down(self) -> str | None:
        """Why the last check failed, while the database is down (None: it answers)."""
        return self.last_error if self._failures else None

    def problem(self) -> str | None:
        """Why no view can be served now (None: the view is usable)."""
        if self._view is None:
            return self.last_error or "knowledge not loaded"
        age = self.age()
        if self._max_age and age is not None and age > self._max_age:
            why = self.last_error or ("a check is still running" if self._checking
                                      else "not refreshed")
            return f"knowledge is {age:.0f} s old (limit {self._max_age:g} s): {why}"
        return None

    def _too_old(self) -> bool:
        """Whether the view is older than ``max_age`` (never, without a limit)."""
        age = self.age()
        return bool(self._max_age) and age is not None and age > self._max_age

    def age(self) -> float | None:
        """Seconds since the version was last read successfully (None: never)."""
        return None if self.checked_at is None else self._clock() - self.checked_at

    def close(self) -> None:
        """Stop the background checker (tests, shutdown); a later view() restarts it."""
        self._stopped.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._check_timeout + 5)
        self._thread = None
        self._stopped.clear()

    def _ensure_checker(self) -> None:
        """Start the checker thread in this process unless it runs (a forked child has none)."""
        if self._thread_pid == os.getpid() and self._thread is not None:
            return
        with self._progress:
            if self._thread_pid == os.getpid() and self._thread is not None:
                return
            self._thread_pid = os.getpid()
            self._thread = threading.Thread(
                target=_check_forever, args=(weakref.ref(self), self._wake, self._stopped),
                name="cortex-knowledge-refresh", daemon=True)
            self._thread.start()

    def _ask_check(self) -> None:
        """Wake the checker for a check now (it skips one that is not due)."""
        with self._progress:
            self._asked += 1
        self._wake.set()

    def _wait_first_load(self) -> None:
        """Wait (within this thread's deadline, else ``check_timeout``) for a first view."""
        left = guard.remaining()
        until = time.monotonic() + (self._check_timeout if left is None else max(left, 0))
        with self._progress:
            while self._view is None and self._failures == 0:
                if not self._progress.wait(until - time.monotonic()):
                    break

    def _checked(self, asked: int) -> None:
        """The checker finished the checks asked for up to ``asked`` (wakes the waiters)."""
        with self._progress:
            self._done = max(self._done, asked)
            self._checking = False
            self._progress.notify_all()

    def _pause(self) -> float:
        """Real seconds the checker sleeps before its next own check.

        The back-off after a failure, else the interval; at least :data:`MIN_PAUSE`.
        """
        retry = self._retry_in
        return max(self._interval if retry is None else retry, MIN_PAUSE)

    def wait_for_refresh(self, timeout: float | None = None) -> None:
        """Wait until the checks asked for so far are done (tests, shutdown)."""
        with self._progress:
            target = self._asked
            self._progress.wait_for(lambda: self._done >= target or self._thread is None,
                                    timeout)

    def refresh(self, force: bool = False, turn: bool = False) -> None:
        """Check the version now and reload when it moved (or when ``force``).

        Skipped while another thread refreshes (unless there is no view yet) and, unless
        ``turn`` (the background checker's own schedule, paced in real time), while the
        next check is not due by the cache's clock.

        A probe of the database (:func:`cortex.db.guard.deadline`): the version read
        waits at most ``check_timeout`` s (or what is left of the caller's deadline),
        a load :data:`LOAD_TIMEOUT` s.
        """
        # With a view to serve, a thread never waits for another's refresh; without
        # one (a cold worker) it waits, within its deadline, or it would answer 503 for
        # nothing.
        if force or self._view is None:
            left = guard.remaining()
            acquired = self._lock.acquire(timeout=-1 if left is None else max(left, 0))
        else:
            acquired = self._lock.acquire(blocking=False)
        if not acquired:
            return
        try:
            if not (force or turn) and self._view is not None \
                    and self._clock() < self._next_check:
                return
            current = self._view
            with guard.deadline(self._check_timeout, probe=True):
                moved = force or current is None or read_version(self._engine) != current.version
            if moved:
                with guard.deadline(LOAD_TIMEOUT, probe=True, detach=True):
                    view = load_view(self._engine, previous=current,
                                     network_keys=self._network_keys,
                                     kubernetes_nodes=self._kubernetes_nodes,
                                     request_sizes=self._request_sizes)
                with self._progress:
                    self._view = view
                LOG.info("knowledge view loaded: version %d, %d hosts",
                         view.version, len(view.hosts))
                if view.skipped_rows:
                    LOG.warning("knowledge view %d left out unreadable rows: %s", view.version,
                                ", ".join(f"{t} {n}" for t, n in view.skipped_rows.items()))
                    for table, rows in view.skipped_rows.items():
                        if self._on_skipped is not None:
                            self._on_skipped(table, rows)
                settle_garbage_collector(len(view.hosts))
            self.checked_at = self._clock()
            if self._failures:
                LOG.warning("knowledge check succeeds again after %d failures", self._failures)
            self._failures, self.last_error = 0, None
            self._next_check = self.checked_at + self._interval
            self._retry_in = None
            self._health.mark_up()
        except SQLAlchemyError as exc:
            self._failed(f"database unreachable: {type(exc).__name__}" if unreachable(exc)
                         else f"knowledge unreadable: {type(exc).__name__}",
                         down=unreachable(exc))
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            LOG.exception("knowledge load failed on what it read")
            self._failed(f"knowledge unreadable: {type(exc).__name__}", down=False)
        finally:
            self._lock.release()
            with self._progress:
                self._progress.notify_all()

    def _failed(self, why: str, down: bool) -> None:
        """A check that failed (``why``): back off; ``down``: the database did not answer."""
        self._failures += 1
        self.last_error = why
        if down:
            self._health.mark_down(why)
        base = min(self._max_retry, max(self._interval, 0.1) * 2 ** self._failures)
        backoff = base * (1 - self._jitter() / 2)
        self._next_check = self._clock() + backoff
        self._retry_in = backoff
        LOG.warning("knowledge refresh failed (%s); next try in %.1f s", why, backoff)


def _check_forever(ref: weakref.ref, wake: threading.Event, stopped: threading.Event) -> None:
    """The background checker of the cache ``ref`` points to, until it is gone or closed."""
    while not stopped.is_set():
        cache: KnowledgeCache | None = ref()
        if cache is None:
            return
        with cache._progress:
            asked = cache._asked
            cache._checking = True
        try:
            cache.refresh(turn=True)
        except Exception:  # noqa: BLE001 - the checker must outlive any failure
            LOG.exception("knowledge check failed")
        cache._checked(asked)
        pause = cache._pause()
        del cache
        wake.wait(pause)
        wake.clear()


#: Views of fewer hosts are left to the collector (:func:`settle_garbage_collector`).
SETTLE_MIN_HOSTS = 100


def settle_garbage_collector(hosts: int) -> None:
    """Keep the long-lived knowledge of a view of ``hosts`` hosts out of full collections.

    A view of N hosts holds some 15 N tracked objects that live until the next version;
    every full collection (triggered by the garbage of ordinary requests) traverses all
    of them: ~100 ms at 1,000 hosts under load, the p99 of the latency benchmark. After
    a view loads: unfreeze (so cycles left by the replaced view can be collected),
    collect once, and freeze what survives into the permanent generation
    (:func:`gc.freeze`, the CPython idiom for long-lived data). Freed by reference
    counting all the same when the next view replaces it.

    That collection traverses every object of the process, not only the view's, so a
    view of fewer than :data:`SETTLE_MIN_HOSTS` hosts, whose objects weigh little on the
    collector, is not frozen; if a larger view was frozen before, it is unfrozen and
    collected once so that its cycles can be freed.
    """
    if hosts >= SETTLE_MIN_HOSTS:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
    elif gc.get_freeze_count():
        gc.unfreeze()
        gc.collect()

"""The long-running sync loop: leader election, one schedule per source, jitter and backoff.

Only the leader syncs; a standby tries to take the leader lock every
``standby_poll`` seconds (half the shortest source interval, at most 10 s), so it
takes over within one interval of the leader's death. The leader runs each source
when it is due, one at a time: after a success the next run is one interval
later, after the n-th consecutive failure ``min(backoff_max, backoff_initial *
2**(n-1))`` later; every wait is stretched by a random factor in ``[1 - jitter,
1 + jitter]``. A new leader runs every source at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from cortex.sync.leader import LeaderLock
from cortex.sync.runner import run_source
from cortex.sync.source import Source
from cortex.sync.status import SyncMetrics

LOG = logging.getLogger(__name__)


@dataclass
class Schedule:
    """When one source runs next (monotonic seconds) and how often it failed in a row."""

    interval: float
    jitter: float = 0.1
    backoff_initial: float = 5.0
    backoff_max: float = 600.0
    next_due: float = 0.0
    failures: int = 0

    def after(self, ok: bool, now: float, rng: random.Random) -> float:
        """Record a run's outcome at ``now``; the next due time."""
        self.failures = 0 if ok else self.failures + 1
        base = self.interval if ok else min(
            self.backoff_max, self.backoff_initial * 2 ** (self.failures - 1))
        self.next_due = now + base * rng.uniform(1 - self.jitter, 1 + self.jitter)
        return self.next_due


class SyncLoop:
    """Run ``sources`` on their schedules while this process holds ``lock``.

    ``stop()`` (from a signal handler or another thread) ends ``run()`` after the
    source that is running; the lock is released on the way out.
    """

    def __init__(self, engine: Engine, sources: list[Source], schedules: dict[str, Schedule],
                 lock: LeaderLock, metrics: SyncMetrics, batch_size: int = 1000,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.engine = engine
        self.sources = sources
        self.schedules = schedules
        self.lock = lock
        self.metrics = metrics
        self.batch_size = batch_size
        self.clock = clock
        self.rng = rng or random.Random()
        self.standby_poll = min(10.0, min(s.interval for s in schedules.values()) / 2)
        self._stop = threading.Event()
        self._leading = False

    def stop(self) -> None:
        """Ask the loop to end after the current run."""
        self._stop.set()

    def run(self) -> None:
        """Lead or stand by until stopped."""
        try:
            while not self._stop.is_set():
                if not self._lead():
                    self._stop.wait(self.standby_poll)
                    continue
                self._stop.wait(self.run_due())
        finally:
            self.lock.release()
            self.metrics.leader.set(0)

    def _lead(self) -> bool:
        """True while this process leads; a fresh leader makes every source due now."""
        leading = self.lock.held() or self.lock.try_acquire()
        if leading and not self._leading:
            now = self.clock()
            for schedule in self.schedules.values():
                schedule.next_due = now
        if leading != self._leading:
            LOG.info("sync leader: %s", "this process" if leading else "another process")
        self._leading = leading
        self.metrics.leader.set(1 if leading else 0)
        return leading

    def run_due(self) -> float:
        """Run every due source once; seconds until the next one is due (at most a poll)."""
        for source in self.sources:
            schedule = self.schedules[source.name]
            if self._stop.is_set() or self.clock() < schedule.next_due:
                continue
            if not self.lock.held():
                self._leading = False
                self.metrics.leader.set(0)
                return 0.0
            result = run_source(self.engine, source, self.batch_size, self.metrics)
            schedule.after(result.ok, self.clock(), self.rng)
        next_due = min(s.next_due for s in self.schedules.values())
        return max(0.0, min(next_due - self.clock(), self.standby_poll))

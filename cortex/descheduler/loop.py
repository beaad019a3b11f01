"""The long-running descheduler: one leader among the replicas, a pass every interval.

Leader election as cortex-sync's (:class:`cortex.sync.leader.LeaderLock`: a
PostgreSQL session-level advisory lock, always held on SQLite), with a lock of its
own, so a sync leader and a descheduler leader may be different processes. A pass
that fails (the database or the knowledge unavailable) is logged and counted; the
next one runs an interval later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from cortex.sync.leader import LEADER_LOCK_ID, LeaderLock

LOG = logging.getLogger(__name__)
#: The descheduler's leader lock: beside cortex-sync's and its per-source locks' range.
DESCHEDULER_LOCK_ID = LEADER_LOCK_ID - 1


class DeschedulerLoop:
    """Run ``one_pass()`` every ``interval`` seconds while this process holds ``lock``.

    ``stop()`` (a signal handler, another thread) ends ``run()`` after the pass that is
    running; the lock is released on the way out.
    """

    def __init__(self, one_pass: Callable[[], Any], lock: LeaderLock, interval: float,
                 on_failure: Callable[[], None] = lambda: None) -> None:
        self.one_pass = one_pass
        self.lock = lock
        self.interval = interval
        self.on_failure = on_failure
        self._stop = threading.Event()

    def run(self) -> None:
        """Passes until stopped."""
        try:
            while not self._stop.is_set():
                if self.lock.try_acquire():
                    try:
                        self.one_pass()
                    except Exception:  # the next pass may find the database back
                        LOG.exception("descheduler: the pass failed")
                        self.on_failure()
                self._stop.wait(self.interval)
        finally:
            self.lock.release()

    def stop(self) -> None:
        """End ``run()`` after the current pass."""
        self._stop.set()

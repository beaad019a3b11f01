"""Per-call cost of the in-flight reservation overlay, in process (no database, no HTTP).

Run: .venv/bin/python bench/overlay_cost.py [--hosts 1000] [--live 100] [--calls 2000]

A reservation feed (:mod:`cortex.store.reservation_feed`) is filled with ``--live``
reservations spread evenly over the ``--hosts`` hosts of one synced view; each call
then deletes the oldest reservation (its instance showed up) and adds one on the same
host (a worker's own promise), one host changed a call as a steady stream of creates
changes them, and lays the live ones over the view as a Nova call
does (the store's read and :func:`cortex.knowledge.reservations.request_view`), once
just after that change and once more with nothing changed. Only that read and overlay
are timed. Prints medians (and the changed call's p99) in microseconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cortex.knowledge.reservations import Reservation, request_view  # noqa: E402
from cortex.store.reservation_feed import ReservationFeed  # noqa: E402
from cortex.store.reservations import ReservationStore  # noqa: E402
from tests.fakes import host, view  # noqa: E402

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)


class _FeedStore:
    """The store's read path over a feed already filled (no database behind it)."""

    def __init__(self, feed: ReservationFeed) -> None:
        self._feed, self._reader = feed, None

    active = ReservationStore.active
    live = getattr(ReservationStore, "live", None)


def _made(n: int, hosts: int) -> Reservation:
    """The ``n``-th reservation, on host ``n % hosts``, for five minutes."""
    return Reservation(f"r{n}", f"h{n % hosts}", f"vm-{n}", None,
                       MappingProxyType({"VCPU": 1}), (), NOW, NOW + timedelta(minutes=5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    synced = view(*(host(f"h{i}") for i in range(args.hosts)), service="nova")
    first = [_made(n, args.hosts) for n in range(args.live)]
    feed = ReservationFeed("", lambda: first, lambda _: None)
    # as if its listener ran in this process
    feed._pid, feed._thread = os.getpid(), threading.current_thread()
    feed._reload()
    store, queue = _FeedStore(feed), deque(first)
    read = store.live if store.live is not None else store.active
    times, still = [], []
    for n in range(args.live, args.live + args.calls):
        gone = queue.popleft()
        made = dataclasses.replace(_made(n, args.hosts), host=gone.host)
        feed.add(made)
        queue.append(made)
        feed._apply([json.dumps({"op": "delete", "old": gone.id,
                                 "old_expires_at": gone.expires_at.isoformat(), "row": None})])
        started = time.perf_counter()
        seen = request_view(synced, read(NOW), NOW, f"vm-ask-{n}", "p")
        times.append(time.perf_counter() - started)
        started = time.perf_counter()
        request_view(synced, read(NOW), NOW, None, "p")
        still.append(time.perf_counter() - started)
        assert made.host not in synced.hosts or seen.hosts[made.host] is not \
            synced.hosts[made.host], "the new reservation is counted"
    times, still = sorted(times[len(times) // 10:]), sorted(still[len(still) // 10:])
    print(f"hosts={args.hosts} live={args.live} calls={args.calls} "
          f"changed_median_us={statistics.median(times) * 1e6:.1f} "
          f"changed_p99_us={times[int(len(times) * 0.99)] * 1e6:.1f} "
          f"unchanged_median_us={statistics.median(still) * 1e6:.1f}")


if __name__ == "__main__":
    main()

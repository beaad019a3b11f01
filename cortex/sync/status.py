"""Per-source sync status: the ``sync_status`` table and the ``cortex_sync_*`` metrics."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql, sqlite

from cortex.db import models
from cortex.sync.snapshot import upsert


class SyncMetrics:
    """cortex-sync's metrics in their own registry (Prometheus naming: ``_total``, ``_seconds``).

    ``runs`` counts runs per source and outcome (``success``, ``error``);
    ``duration`` observes run times; ``last_success`` is the Unix time of the last
    success; ``rows``/``changed_rows`` describe the last snapshot; ``failures`` the
    consecutive failures; ``leader`` is 1 while this process holds the leader lock.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        kwargs = {"registry": self.registry}
        self.runs = Counter("cortex_sync_runs", "Sync runs per source and outcome.",
                            ["source", "outcome"], **kwargs)
        self.duration = Histogram(
            "cortex_sync_duration_seconds", "Time of one sync run (read, write, commit).",
            ["source"], buckets=(.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            **kwargs)
        self.last_success = Gauge("cortex_sync_last_success_timestamp_seconds",
                                  "Unix time of the last successful run.", ["source"], **kwargs)
        self.rows = Gauge("cortex_sync_rows", "Rows in the last successful snapshot.",
                          ["source"], **kwargs)
        self.changed_rows = Counter("cortex_sync_changed_rows",
                                    "Rows inserted, updated or deleted by successful runs.",
                                    ["source"], **kwargs)
        self.failures = Gauge("cortex_sync_consecutive_failures",
                              "Failed runs since the last success.", ["source"], **kwargs)
        self.leader = Gauge("cortex_sync_leader",
                            "1 while this process holds the sync leader lock, else 0.", **kwargs)


def previous_detail(connection: Connection, source: str) -> dict[str, Any]:
    """The ``detail`` of ``source``'s last successful run; ``{}`` before the first.

    A failed run keeps the detail of the success before it (:func:`record_failure`).
    """
    table = models.SyncStatus.__table__
    detail = connection.execute(select(table.c.detail).where(
        table.c.source == source, table.c.last_success_at.is_not(None))).scalar()
    return dict(detail or {})


def record_success(connection: Connection, source: str, at: datetime, duration: float,
                   rows: int, changed: int, owner: str, detail: dict[str, Any]) -> None:
    """Write a successful run into ``sync_status`` (inside the run's transaction)."""
    upsert(connection, models.SyncStatus.__table__, [{
        "source": source, "last_attempt_at": at, "last_success_at": at,
        "consecutive_failures": 0, "duration_seconds": duration, "rows": rows,
        "changed": changed, "owner": owner, "detail": detail}], ("source",))


def record_failure(connection: Connection, source: str, at: datetime, duration: float,
                   error: str, owner: str) -> int:
    """Write a failed run into ``sync_status``; the consecutive failures so far.

    Keeps the last success, rows and detail of the previous good snapshot.
    """
    table = models.SyncStatus.__table__
    failures = 1 + (connection.execute(
        select(table.c.consecutive_failures).where(table.c.source == source)).scalar() or 0)
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    failure = {"last_attempt_at": at, "last_error_at": at, "last_error": error[:2048],
               "consecutive_failures": failures, "duration_seconds": duration, "owner": owner}
    connection.execute(dialect.insert(table).values(
        source=source, rows=0, changed=0, detail={}, **failure).on_conflict_do_update(
            index_elements=["source"], set_=failure))
    return failures

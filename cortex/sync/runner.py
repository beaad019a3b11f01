"""Run one source: its snapshot, derivations, version bump and status in one transaction."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine

from cortex.store.version import bump_version
from cortex.sync import derive
from cortex.sync.leader import lock_source
from cortex.sync.source import Source, SyncContext
from cortex.sync.status import SyncMetrics, previous_detail, record_failure, record_success

LOG = logging.getLogger(__name__)

# What each source's changes feed, recomputed in the same transaction.
DERIVATIONS: dict[str, tuple[Callable[[SyncContext], None], ...]] = {
    "nova": (derive.refresh_compute_nodes, derive.refresh_nova_features,
             derive.refresh_placement_features, derive.follow_commitments,
             derive.forget_kept_promises),
    "placement": (derive.refresh_compute_nodes, derive.refresh_placement_features),
    "prometheus": (derive.refresh_compute_nodes,),
}


def owner_name() -> str:
    """``hostname:pid`` of this process, kept in ``sync_status.owner``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class RunResult:
    """The outcome of one run: rows in the snapshot, rows changed, seconds, error or None."""

    source: str
    rows: int
    changed: int
    duration: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the snapshot was committed."""
        return self.error is None


def run_source(engine: Engine, source: Source, batch_size: int = 1000,
               metrics: SyncMetrics | None = None, owner: str | None = None) -> RunResult:
    """Sync ``source`` once; never raises for the source's own failures.

    In one transaction: take the source's lock, let the source write its
    snapshot, recompute what it feeds (:data:`DERIVATIONS`), bump the knowledge
    version if any row changed and record the success. On any error the
    transaction rolls back (the previous snapshot stays) and the failure is
    recorded in a transaction of its own.
    """
    owner = owner or owner_name()
    started, at = time.monotonic(), datetime.now(UTC)
    try:
        with engine.begin() as connection:
            lock_source(connection, source.name)
            ctx = SyncContext(connection, batch_size, previous_detail(connection, source.name))
            source.sync(ctx)
            source_changed = ctx.changed
            if source_changed:
                for step in DERIVATIONS.get(source.name, ()):
                    step(ctx)
                bump_version(connection)
            ctx.detail["tables"] = {name: vars(c) for name, c in sorted(ctx.tables.items())}
            duration = time.monotonic() - started
            record_success(connection, source.name, at, duration, ctx.rows, ctx.changed,
                           owner, ctx.detail)
        result = RunResult(source.name, ctx.rows, ctx.changed, duration)
    except Exception as exc:  # any failure of a source is recorded, never fatal
        duration = time.monotonic() - started
        error = f"{type(exc).__name__}: {exc}"
        LOG.warning("sync %s failed after %.1f s: %s", source.name, duration, error,
                    exc_info=LOG.isEnabledFor(logging.DEBUG))
        result = RunResult(source.name, 0, 0, duration, error)
        failures = _record_failure(engine, source.name, at, duration, error, owner)
        if metrics:
            metrics.failures.labels(source.name).set(failures)
    _observe(metrics, result)
    if result.ok:
        LOG.info("sync %s: %d rows, %d changed, %.2f s", source.name, result.rows,
                 result.changed, result.duration)
    return result


def _record_failure(engine: Engine, source: str, at: datetime, duration: float, error: str,
                    owner: str) -> int:
    """Record a failure; 0 when even that fails (the database is the likely culprit)."""
    try:
        with engine.begin() as connection:
            return record_failure(connection, source, at, duration, error, owner)
    except Exception as exc:  # the database itself is likely down
        LOG.warning("sync %s: could not record the failure: %s", source, type(exc).__name__)
        return 0


def _observe(metrics: SyncMetrics | None, result: RunResult) -> None:
    """Update the cortex_sync_* metrics with one run."""
    if metrics is None:
        return
    metrics.runs.labels(result.source, "success" if result.ok else "error").inc()
    metrics.duration.labels(result.source).observe(result.duration)
    if result.ok:
        metrics.last_success.labels(result.source).set(time.time())
        metrics.rows.labels(result.source).set(result.rows)
        metrics.changed_rows.labels(result.source).inc(result.changed)
        metrics.failures.labels(result.source).set(0)

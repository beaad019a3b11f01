"""Runs that read what changed since the previous run, with a full read now and then.

Reading every server and every provider's usages on every run costs minutes at
10,000 hosts, while a minute's changes touch a few hosts. Nova answers
``GET /servers/detail?changes-since=T`` (and ``GET /os-migrations?changes-since=T``
from microversion 2.59) with what its database updated at or after ``T``,
deleted servers included (status ``DELETED``): Nova's API reference, "List
Servers Detailed", and ``nova/db/main/api.py``'s ``instance_get_all_by_filters_sort``.

A source that reads changes keeps in its ``sync_status.detail`` when its last run
began by Nova's clock (the ``Date`` header of Nova's first answer, taken before
anything else is read) and when it last read everything by this host's clock.
The next run asks for changes since that beginning less ``[sync]
changes_since_overlap``, so a change committed while the previous run read, or
stamped by a database clock a little behind the API's, is read again rather
than missed. Every ``[sync] full_sync_interval`` seconds, after a failed run's
successor has no beginning to start from, and on the first run, the source
reads everything instead: that is what catches what changes cannot show (a
deleted server archived out of Nova's database before any run saw it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cortex.sync.source import SyncContext

#: The key of ``SyncContext.detail`` this module owns.
DETAIL_KEY = "changes"


@dataclass(frozen=True)
class ChangeWindow:
    """What one run reads: everything (``since`` is None) or the changes since ``since``.

    ``since`` is a UTC time by Nova's clock; ``last_full_at`` the UTC time (this
    host's clock) of the last run that read everything, None before the first;
    ``reason`` says in a few words why the run is full or not, for the detail.
    """

    since: datetime | None
    last_full_at: datetime | None
    reason: str

    @property
    def full(self) -> bool:
        """True when this run reads everything."""
        return self.since is None

    def since_param(self) -> str:
        """``since`` as Nova's ``changes-since`` takes it: ISO 8601 in UTC, ``Z``."""
        assert self.since is not None, "a full run has no changes-since"
        return self.since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: Any) -> datetime | None:
    """A time this module wrote into the detail, or None."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def plan(ctx: SyncContext, full_interval: float, overlap: float,
         now: datetime | None = None) -> ChangeWindow:
    """The window of this run from the previous run's detail.

    Full when ``full_interval`` is 0, when no previous run recorded where it
    began, or when the last full read is ``full_interval`` seconds old or more;
    else the changes since the previous beginning less ``overlap`` seconds.
    """
    now = now or datetime.now(UTC)
    previous = ctx.previous.get(DETAIL_KEY) or {}
    last_full = _parse(previous.get("last_full_at"))
    began = _parse(previous.get("began"))
    if full_interval <= 0:
        return ChangeWindow(None, last_full, "every run reads all (full_sync_interval = 0)")
    if began is None or last_full is None:
        return ChangeWindow(None, last_full, "no previous run to read changes since")
    if (now - last_full).total_seconds() >= full_interval:
        return ChangeWindow(None, last_full, f"the last full read is {full_interval:g} s old")
    return ChangeWindow(began - timedelta(seconds=overlap), last_full,
                        "changes since the previous run")


def record(ctx: SyncContext, window: ChangeWindow, began: datetime,
           now: datetime | None = None) -> None:
    """Keep in the run's detail where this run began (Nova's clock) and its window."""
    now = now or datetime.now(UTC)
    last_full = now if window.full else window.last_full_at
    ctx.detail[DETAIL_KEY] = {
        "mode": "full" if window.full else "changes", "reason": window.reason,
        "since": None if window.full else window.since_param(),
        "began": began.astimezone(UTC).isoformat(),
        "last_full_at": last_full.astimezone(UTC).isoformat() if last_full else None}

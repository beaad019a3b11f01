"""When a sync run reads Nova's changes and when it reads everything (cortex.sync.changes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cortex.sync import changes
from cortex.sync.source import SyncContext

T0 = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def run(previous: dict, at: datetime, began: datetime, full_interval: float = 3600,
        overlap: float = 300) -> tuple[changes.ChangeWindow, dict]:
    """One run: its window, and the detail the next run will see as ``previous``."""
    ctx = SyncContext(connection=None, previous=previous)  # type: ignore[arg-type]
    window = changes.plan(ctx, full_interval, overlap, now=at)
    changes.record(ctx, window, began, now=at)
    return window, ctx.detail


def test_the_first_run_is_full_then_changes_since_the_previous_beginning_less_the_overlap():
    first, detail = run({}, T0, began=T0 - timedelta(seconds=7))  # Nova's clock 7 s behind
    assert first.full and detail["changes"]["mode"] == "full"
    second, detail = run(detail, T0 + timedelta(seconds=60), began=T0 + timedelta(seconds=53))
    assert not second.full
    assert second.since == T0 - timedelta(seconds=307)
    assert second.since_param() == "2026-11-25T11:54:53Z"
    assert detail["changes"]["last_full_at"] == T0.isoformat()  # carried, not reset
    third, _ = run(detail, T0 + timedelta(seconds=120), began=T0 + timedelta(seconds=113))
    assert third.since == T0 + timedelta(seconds=53 - 300)


def test_a_full_read_every_full_interval_and_on_every_run_when_it_is_zero():
    _, detail = run({}, T0, began=T0)
    almost, detail_almost = run(detail, T0 + timedelta(seconds=3599), began=T0)
    assert not almost.full
    due, detail_due = run(detail_almost, T0 + timedelta(seconds=3600), began=T0)
    assert due.full and "3600 s old" in due.reason
    assert detail_due["changes"]["last_full_at"] == (T0 + timedelta(seconds=3600)).isoformat()
    always, _ = run(detail, T0 + timedelta(seconds=1), began=T0, full_interval=0)
    assert always.full


def test_a_detail_without_a_readable_beginning_means_a_full_read():
    for previous in ({"changes": {"began": "yesterday", "last_full_at": T0.isoformat()}},
                     {"changes": {"began": T0.isoformat(), "last_full_at": None}},
                     {"changes": {}}, {"tables": {}}):
        window, _ = run(previous, T0 + timedelta(seconds=10), began=T0)
        assert window.full, previous

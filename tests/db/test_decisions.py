"""The decision log: background writer, queries, retention, drops when full."""

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete

from cortex.db.models import Decision
from cortex.decision import Decision as DecisionRecord
from cortex.store.decisions import DecisionStore, DecisionWriter
from tests.waiting import DEADLINE, wait_until


def record(resource_id="inst-1", created_at=None, request_id="req-1", **changes):
    fields = dict(id=str(uuid.uuid4()), created_at=created_at or datetime.now(UTC),
                  service="nova", pipeline="p", request_id=request_id, resource_id=resource_id,
                  intent="create", outcome="ok", duration_ms=1.5, hosts=("a", "b"),
                  result=("b", "a"), status=200)
    return DecisionRecord(**(fields | changes))


def test_writer_writes_and_store_finds(engine):
    resource = f"inst-{uuid.uuid4()}"
    writer = DecisionWriter(engine, maxsize=100)
    first, second = record(resource), record(resource)
    assert writer.submit(first) and writer.submit(second)
    writer.flush(DEADLINE)
    store = DecisionStore(engine)
    found = store.find(resource_id=resource)
    assert {d.id for d in found} == {first.id, second.id}
    one = store.get(first.id)
    assert one.result == ("b", "a") and one.resource_id == resource
    assert store.get("no-such-id") is None
    writer.close(DEADLINE)
    assert writer.written == 2 and writer.dropped == 0


def test_full_queue_drops_without_blocking(engine):
    drops = []
    writer = DecisionWriter(engine, maxsize=1, on_drop=lambda: drops.append(1))
    release, busy = threading.Event(), threading.Event()
    writer._write = lambda batch: (busy.set(), release.wait(DEADLINE))  # stuck writing
    assert writer.submit(record())
    assert busy.wait(DEADLINE)                # the thread holds that one and is blocked
    assert writer.submit(record())            # fills the single slot
    assert [writer.submit(record()) for _ in range(3)] == [False, False, False]
    assert len(drops) == 3 and writer.dropped == 3 and writer.depth == 1
    release.set()
    writer.close(DEADLINE)


def test_records_within_the_flush_interval_are_written_together(engine):
    # An interval far beyond the test's deadline: only the flush can end the wait.
    writer = DecisionWriter(engine, flush_interval=10 * DEADLINE)
    batches = []
    real_write = writer._write
    writer._write = lambda batch: (batches.append(len(batch)), real_write(batch))
    first = [record(), record(), record()]
    for item in first:
        writer.submit(item)
    writer.flush(DEADLINE)
    assert batches == [3] and writer.written == 3
    store = DecisionStore(engine)
    assert all(store.get(item.id) is not None for item in first)
    writer.close(DEADLINE)


def test_a_full_batch_is_written_without_waiting_for_the_interval(engine):
    writer = DecisionWriter(engine, batch=2, flush_interval=10 * DEADLINE)
    for _ in range(3):
        writer.submit(record())
    wait_until(lambda: writer.written == 2, what="the full batch written")
    assert writer.written == 2  # the third waits for its interval, or a flush
    writer.close(DEADLINE)
    assert writer.written == 3


def test_records_wait_for_the_calls_in_flight_to_end(engine):
    # A wait far beyond the test's deadline: only the end of the calls can end it.
    writer = DecisionWriter(engine, quiet_wait=10 * DEADLINE)
    first, second = record(), record()
    with writer.call():
        with writer.call():
            writer.submit(first)
            wait_until(lambda: writer.holding == 1, what="the record held back")
        assert writer.holding == 1 and writer.written == 0  # one call still runs
        assert DecisionStore(engine).get(first.id) is None
    wait_until(lambda: writer.written == 1, what="the record written after the calls")
    assert writer.holding == 0 and DecisionStore(engine).get(first.id) is not None
    writer.submit(second)  # no call in flight: written at once
    wait_until(lambda: writer.written == 2, what="the record written")
    writer.close(DEADLINE)


def test_a_full_batch_or_a_flush_is_not_held_back_for_a_call(engine):
    writer = DecisionWriter(engine, batch=2, quiet_wait=10 * DEADLINE)
    batches = []
    real_write = writer._write
    writer._write = lambda batch: (batches.append(len(batch)), real_write(batch))
    with writer.call():
        writer.submit(record())
        wait_until(lambda: writer.holding == 1, what="the record held back")
        writer.submit(record())
        wait_until(lambda: writer.written == 2, what="the full batch written")
        assert batches == [2]
        writer.submit(record())
        wait_until(lambda: writer.holding == 1, what="the third held back")
        writer.flush(DEADLINE)
        assert writer.written == 3
        writer.submit(record())
        wait_until(lambda: writer.holding == 1, what="a later one held back again")
        writer.close(DEADLINE)
    assert writer.written == 4


def test_calls_are_not_counted_without_a_quiet_wait(engine):
    writer = DecisionWriter(engine)
    with writer.call():
        writer.submit(record())
        wait_until(lambda: writer.written == 1, what="the record written during the call")
    assert writer._in_flight == 0
    writer.close(DEADLINE)


def test_prune_deletes_only_old_decisions(engine):
    resource = f"inst-{uuid.uuid4()}"
    writer = DecisionWriter(engine)
    old = record(resource, created_at=datetime.now(UTC) - timedelta(days=40))
    new = record(resource)
    writer.submit(old)
    writer.submit(new)
    writer.close(DEADLINE)
    store = DecisionStore(engine)
    assert store.prune(30) >= 1
    assert [d.id for d in store.find(resource_id=resource)] == [new.id]
    with engine.begin() as connection:
        connection.execute(delete(Decision).where(Decision.resource_id == resource))


def test_write_failure_is_counted_not_raised(engine):
    writer = DecisionWriter(engine)
    broken = record(outcome=None)  # NOT NULL column: the insert fails
    writer.submit(broken)
    writer.close(DEADLINE)
    assert writer.dropped == 1 and writer.written == 0


def test_writer_applies_retention_after_writes(engine):
    resource = f"inst-{uuid.uuid4()}"
    old = record(resource, created_at=datetime.now(UTC) - timedelta(days=10))
    setup = DecisionWriter(engine)
    setup.submit(old)
    setup.close(DEADLINE)
    writer = DecisionWriter(engine, retention_days=5)
    new = record(resource)
    writer.submit(new)
    writer.close(DEADLINE)
    assert [d.id for d in DecisionStore(engine).find(resource_id=resource)] == [new.id]


def test_handled_batches_and_failed_writes_are_reported(engine):
    handled, drops = [], []
    writer = DecisionWriter(engine, on_handled=handled.append,
                            on_drop=lambda: drops.append(1))
    broken = record(outcome=None)  # NOT NULL column: the batch cannot be written
    writer.submit(broken)
    writer.flush(DEADLINE)
    assert sum(handled) == 1 and drops == [1]
    writer.submit(record())
    writer.submit(record())
    writer.close(DEADLINE)
    assert sum(handled) == 3 and drops == [1] and writer.written == 2


def test_store_filters_on_indexed_columns_and_resolves_keys(engine):
    resource = f"inst-{uuid.uuid4()}"
    writer = DecisionWriter(engine)
    old = record(resource, created_at=datetime.now(UTC) - timedelta(minutes=5),
                 request_id=f"req-{resource}")
    new = record(resource, outcome="simulated")
    writer.submit(old)
    writer.submit(new)
    writer.close(DEADLINE)
    store = DecisionStore(engine)
    assert [d.id for d in store.find(resource_id=resource, outcome="simulated")] == [new.id]
    assert [d.id for d in store.find(resource_id=resource, service="cinder")] == []
    assert store.resolve(old.id) == (store.get(old.id), 1)
    found, count = store.resolve(resource)
    assert found.id == new.id and count == 2
    assert store.resolve(f"req-{resource}")[0].id == old.id
    assert store.resolve("nothing-like-it") == (None, 0)
    with pytest.raises(TypeError, match="colour"):
        store.find(colour="red")
    with engine.begin() as connection:
        connection.execute(delete(Decision).where(Decision.resource_id == resource))


def test_json_columns_read_back_every_value_postgresql_stores(engine):
    """orjson reads the common values, the standard library what orjson refuses."""
    item = record(f"inst-{uuid.uuid4()}").as_row()
    item["record"] |= {"huge": 10**30, "float": 0.1, "text": "GPU ✓", "nested": [{"a": None}]}
    with engine.begin() as connection:
        connection.execute(Decision.__table__.insert(), [item])
    try:
        with engine.connect() as connection:
            stored = connection.execute(Decision.__table__.select().where(
                Decision.id == item["id"])).one().record
        assert stored == item["record"]
    finally:
        with engine.begin() as connection:
            connection.execute(delete(Decision).where(Decision.id == item["id"]))

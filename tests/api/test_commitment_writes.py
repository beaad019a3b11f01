"""The commitment write under concurrency, retries and hostile values.

On the demo fleet the owner's room in az-1 is exactly four 2x H100 instances (cmp0010
with 2 free GPUs, cmp0011 with 6: tests/api/test_commitments.py). Several apps on one
PostgreSQL database stand for several API workers, each with its own knowledge view:
a commitment one worker stores is not in the other's view until it reloads, so only
the write's own lock and re-read keep two workers from promising the same room.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, text

from cortex.api.app import create_app
from cortex.db import guard, models
from cortex.store.commitments import LOCK_KEY
from tests.api.conftest import make_conf, stop_app
from tests.api.test_commitments import H100, OWNER, ask
from tests.conftest import demo_database, demo_sqlite

WORKERS = 3


@pytest.fixture(scope="module")
def demo():
    with demo_database("commitment_writes") as found:
        yield found


def build(url, engine, **overrides):
    """An app (one "worker") on the demo database, its knowledge read once at start."""
    return create_app(make_conf(**{"database.connection": url,
                                   "database.knowledge_check_interval": 3600.0} | overrides),
                      engine=engine)


@pytest.fixture(scope="module")
def started(demo):
    """The module's workers, built once.

    Their budget is long: fifty writes queue on one lock in one process, and on a busy
    machine the default 2 s could run out for the last of them (a 503, not a 409).
    """
    url, engine = demo
    apps = [build(url, engine, **{"scheduler.request_time_budget": 60.0})
            for _ in range(WORKERS)]
    yield apps
    for app in apps:
        stop_app(app)


@pytest.fixture
def workers(started):
    """The workers, each with a view of a database that holds no commitment.

    After the test its commitments are deleted and every worker loads the view again
    (a worker whose view still held them would count their room in its scheduling).
    """
    yield started
    client = started[0].test_client()
    for made in client.get("/v1/commitments").get_json()["commitments"]:
        client.delete(f"/v1/commitments/{made['id']}")
    for app in started:
        app.extensions["cortex"].knowledge.refresh(force=True)


def body(**changes):
    """The owner's whole az-1 room: four 2x H100 instances."""
    return {"project_id": OWNER, "availability_zone": "az-1", "vcpus": 16,
            "memory_mb": 65536, "gpus": 2, "products": [H100], "count": 4,
            "end_at": (datetime.now(UTC) + timedelta(days=30)).isoformat()} | changes


def stored(engine) -> tuple[int, int]:
    """``(commitments, holds)`` in the database."""
    with engine.connect() as connection:
        return (connection.execute(select(func.count()).select_from(models.Commitment)).scalar(),
                connection.execute(select(func.count())
                                   .select_from(models.CommitmentHold)).scalar())


def test_fifty_concurrent_commitments_for_one_room_make_exactly_one(workers, demo):
    for app in workers:  # every worker's view is loaded before any commitment exists
        app.extensions["cortex"].knowledge.view()
    start = threading.Barrier(50)

    def post(index):
        client = workers[index % WORKERS].test_client()
        start.wait()
        return client.post("/v1/commitments", json=body(description=f"try {index}"))

    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(post, range(50)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] + [409] * 49, [a.get_json() for a in answers if a.status_code
                                             not in (201, 409)]
    assert stored(demo[1]) == (1, 4)
    refused = next(a for a in answers if a.status_code == 409).get_json()
    assert "0 of 4 instances fit" in refused["errors"][0]["detail"]


def test_a_worker_with_an_old_view_does_not_commit_the_same_room_again(workers, demo):
    first, second = (app.test_client() for app in workers[:2])
    workers[1].extensions["cortex"].knowledge.view()  # loaded before the first commit
    assert first.post("/v1/commitments", json=body()).status_code == 201
    version = workers[1].extensions["cortex"].knowledge.current.version
    again = second.post("/v1/commitments", json=body())
    # the second worker's view is still the version without the commitment...
    assert workers[1].extensions["cortex"].knowledge.current.version == version
    # ...yet the write read the stored commitments under the lock
    assert again.status_code == 409, again.get_data(as_text=True)
    assert stored(demo[1]) == (1, 4)


def test_room_is_held_for_every_moment_of_a_period_and_only_then(workers, demo):
    client = workers[0].test_client()
    now = datetime.now(UTC)

    def period(start_days, end_days):
        return {"start_at": (now + timedelta(days=start_days)).isoformat(),
                "end_at": (now + timedelta(days=end_days)).isoformat()}

    # one that starts later still holds its room for most of the same period
    assert client.post("/v1/commitments", json=body(**period(1, 30))).status_code == 201
    assert client.post("/v1/commitments", json=body(**period(0, 30))).status_code == 409
    assert client.post("/v1/commitments", json=body(**period(29, 60))).status_code == 409
    # periods that do not meet may use the same room
    assert client.post("/v1/commitments", json=body(**period(30, 60))).status_code == 201
    assert client.post("/v1/commitments", json=body(**period(0, 1))).status_code == 201
    assert stored(demo[1]) == (3, 12)


def test_a_commitment_waits_for_anothers_lock_only_within_the_budget(demo):
    url, engine = demo
    app = build(url, engine, **{"scheduler.request_time_budget": 0.5})
    try:
        with engine.connect() as holder:  # another worker placing a commitment
            holder.execute(text("SELECT pg_advisory_xact_lock(:n, :k)"),
                           {"n": LOCK_KEY[0], "k": LOCK_KEY[1]})
            answer = app.test_client().post("/v1/commitments", json=body())
            holder.rollback()
        assert answer.status_code == 503, answer.get_data(as_text=True)
        error = answer.get_json()["errors"][0]
        assert error["code"] == "cortex.commitment_budget"
        assert "another commitment" in error["detail"]
        assert stored(engine) == (0, 0)
        assert not guard.health(engine).down  # a lock wait is not a database outage
        made = app.test_client().post("/v1/commitments", json=body())
        assert made.status_code == 201
        assert app.test_client().delete(f"/v1/commitments/{made.get_json()['id']}") \
            .status_code == 204
    finally:
        stop_app(app)


def test_a_retry_with_the_same_idempotency_key_answers_the_first_commitment(workers, demo):
    client, other = (app.test_client() for app in workers[:2])
    sent = body(count=1)
    first = client.post("/v1/commitments", json=sent, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    retried = other.post("/v1/commitments", json=sent, headers={"Idempotency-Key": "k-1"})
    assert retried.status_code == 201, retried.get_data(as_text=True)
    assert retried.headers["Idempotent-Replayed"] == "true"
    assert retried.get_json()["id"] == first.get_json()["id"]
    assert retried.get_json()["holds"] == first.get_json()["holds"]
    assert stored(demo[1]) == (1, 1)
    reused = client.post("/v1/commitments", json=body(count=2),
                         headers={"Idempotency-Key": "k-1"})
    assert reused.status_code == 422
    assert reused.get_json()["errors"][0]["code"] == "cortex.idempotency_key_reused"
    # without a key the same body is a second commitment, as an operator may mean
    assert client.post("/v1/commitments", json=sent).status_code == 201
    assert stored(demo[1]) == (2, 2)


@pytest.mark.parametrize("key", ["", "a b", "x" * 256, "caf\u00e9"])
def test_a_malformed_idempotency_key_is_a_400_and_nothing_is_stored(workers, demo, key):
    answer = workers[0].test_client().post("/v1/commitments", json=body(count=1),
                                           headers={"Idempotency-Key": key})
    assert answer.status_code == 400
    assert "Idempotency-Key" in answer.get_json()["errors"][0]["detail"]
    assert stored(demo[1]) == (0, 0)


@pytest.mark.parametrize("changes, message", [
    ({"start_at": "0001-01-01T00:00:00+14:00"}, "start_at"),
    ({"end_at": "9999-12-31T23:59:59-14:00"}, "end_at"),
    ({"start_at": "1969-12-31T23:59:59Z"}, "start_at"),
    ({"end_at": "10000-01-01T00:00:00Z"}, "end_at"),
    ({"end_at": "2030-01-01T00:00:00+24:00"}, "end_at"),
    ({"project_id": "p\ud800"}, "project_id"),
    ({"description": "lone \udfff"}, "description"),
    ({"description": "nul \x00"}, "description"),
    ({"description": "bell \x07"}, "description"),
    ({"availability_zone": "az-1\x85"}, "availability_zone"),
    ({"availability_zone": ""}, "availability_zone"),
    ({"count": 101}, "count"),
])
def test_values_no_reader_could_hold_are_refused_with_400_and_scheduling_goes_on(
        workers, demo, changes, message):
    client = workers[0].test_client()
    answer = client.post("/v1/commitments", json=body(count=1) | changes)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert message in answer.get_json()["errors"][0]["detail"]
    assert stored(demo[1]) == (0, 0)
    assert ask(client, "c" * 32)  # the scheduler still answers


def test_the_widest_times_a_reader_can_hold_are_stored_and_read_back(workers, demo):
    client = workers[0].test_client()
    made = client.post("/v1/commitments", json=body(
        count=1, start_at="1970-01-01T00:00:00Z", end_at="9999-12-31T23:59:59.999999Z"))
    assert made.status_code == 201, made.get_data(as_text=True)
    knowledge = workers[1].extensions["cortex"].knowledge
    knowledge.refresh(force=True)
    (loaded,) = knowledge.view().commitments
    assert (loaded.start_at.year, loaded.end_at.year) == (1970, 9999)
    shown = workers[1].test_client().get(f"/v1/commitments/{made.get_json()['id']}")
    assert shown.get_json()["end_at"] == "9999-12-31T23:59:59.999999+00:00"


def test_commitments_on_sqlite_are_written_one_at_a_time_too(tmp_path):
    url, engine = demo_sqlite(tmp_path / "cortex.sqlite")
    apps = [build(url, engine) for _ in range(2)]
    try:
        for app in apps:
            app.extensions["cortex"].knowledge.view()
        start = threading.Barrier(10)

        def post(index):
            client = apps[index % 2].test_client()
            start.wait()
            return client.post("/v1/commitments", json=body()).status_code

        with ThreadPoolExecutor(10) as pool:
            assert sorted(pool.map(post, range(10))) == [201] + [409] * 9
        assert stored(engine) == (1, 4)
    finally:
        for app in apps:
            stop_app(app)
        engine.dispose()

"""One bad row never takes the knowledge down, and a data error is not an outage.

Rows are written here the way an older release or a hand-made INSERT could write them,
past the bounds the write paths keep: a commitment ending in year 10000 UTC (PostgreSQL
holds it, Python's datetime cannot), a compute node whose instances lack their uuid.
The knowledge load leaves such a row out, counts it per table and logs its key; every
reader (the scheduler, the commitments API, the healthcheck) goes on with the rest.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DataError, IntegrityError

from cortex.api.app import create_app
from cortex.db import guard
from cortex.db.engine import UnreadableTime
from cortex.knowledge import cache as cache_module
from cortex.knowledge.loader import load_view
from tests.api.conftest import make_conf, stop_app
from tests.api.test_contract import nova_body, post
from tests.conftest import demo_database

BAD_END = "9999-12-31T23:59:59-14:00"  # year 10000 once in UTC


@pytest.fixture
def demo():
    with demo_database("unreadable") as found:
        yield found


def insert_commitment(connection, end_at: str) -> str:
    made = str(uuid.uuid4())
    connection.execute(text(
        "INSERT INTO commitments (id, project_id, availability_zone, vcpus, memory_mb, gpus, "
        "products, count, start_at, end_at, created_at, description) VALUES (:id, 'p', "
        "'az-1', 2, 1024, 0, '[]', 1, now(), CAST(:end_at AS timestamptz), now(), 'by hand')"),
        {"id": made, "end_at": end_at})
    return made


def test_the_check_refuses_a_time_no_reader_can_hold(demo):
    with pytest.raises(IntegrityError), demo[1].begin() as connection:
        insert_commitment(connection, BAD_END)


def test_a_time_beyond_pythons_years_reads_as_unreadable_not_as_an_error(demo):
    with demo[1].connect() as connection:
        value = connection.execute(text(f"SELECT CAST('{BAD_END}' AS timestamptz)")).scalar()
    assert isinstance(value, UnreadableTime) and value.text.startswith("10000-01-01")


def test_an_unreadable_commitment_is_left_out_counted_and_logged(demo, caplog):
    url, engine = demo
    with engine.begin() as connection:  # as a release without the check wrote it
        connection.execute(text(
            "ALTER TABLE commitments DROP CONSTRAINT ck_commitments_times_in_range"))
        bad = insert_commitment(connection, BAD_END)
        good = insert_commitment(connection, "2099-01-01T00:00:00Z")
    caplog.set_level(logging.WARNING, "cortex.knowledge")
    app = create_app(make_conf(**{"database.connection": url}), engine=engine)
    try:
        client = app.test_client()
        view = app.extensions["cortex"].knowledge.view()
        assert [c.id for c in view.commitments] == [good]
        assert dict(view.skipped_rows) == {"commitments": 1}
        assert any(bad in r.getMessage() and "commitments" in r.getMessage()
                   for r in caplog.records)
        assert post(client, "nova", nova_body()).status_code == 200
        assert client.get("/healthcheck").status_code == 200
        listed = client.get("/v1/commitments")
        assert listed.status_code == 200
        assert [c["id"] for c in listed.get_json()["commitments"]] == [good]
        assert ('cortex_knowledge_rows_skipped_total{table="commitments"} 1.0'
                in client.get("/metrics").get_data(as_text=True))
    finally:
        stop_app(app)


def test_a_compute_node_whose_facts_are_malformed_is_left_out_alone(demo):
    url, engine = demo
    with engine.begin() as connection:
        host = connection.execute(text(
            "SELECT host FROM compute_nodes ORDER BY host LIMIT 1")).scalar()
        connection.execute(text("UPDATE compute_nodes SET instances = CAST(:bad AS jsonb) "
                                "WHERE host = :host"),
                           {"bad": json.dumps([{"project_id": "no uuid"}]), "host": host})
        hosts = connection.execute(text("SELECT count(DISTINCT host) FROM compute_nodes")
                                   ).scalar()
    view = load_view(engine)
    assert host not in view.hosts and len(view.hosts) == hosts - 1
    assert dict(view.skipped_rows) == {"compute_nodes": 1}


def test_a_data_error_is_knowledge_unreadable_and_the_database_stays_up(demo, monkeypatch):
    url, engine = demo
    app = create_app(make_conf(**{"database.connection": url}), engine=engine)
    knowledge = app.extensions["cortex"].knowledge
    try:
        knowledge.view()

        def refuse(*_args, **_kwargs):
            raise DataError("SELECT ...", {}, ValueError("timestamp too large"))

        monkeypatch.setattr(cache_module, "load_view", refuse)
        knowledge.refresh(force=True)
        assert knowledge.last_error == "knowledge unreadable: DataError"
        assert not guard.health(engine).down  # the request path keeps its database
        assert post(app.test_client(), "nova", nova_body()).status_code == 200  # last view
    finally:
        stop_app(app)


def test_the_stored_commitments_with_times_at_both_bounds_read_back(demo):
    url, engine = demo
    with engine.begin() as connection:
        made = insert_commitment(connection, "9999-12-31T23:59:59.999999Z")
    (loaded,) = load_view(engine).commitments
    assert loaded.id == made and loaded.end_at == datetime(9999, 12, 31, 23, 59, 59, 999999,
                                                           tzinfo=UTC)

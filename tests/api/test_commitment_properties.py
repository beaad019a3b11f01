"""Whatever a commitment POST accepts, every reader reads back (Hypothesis).

Generated bodies carry what an operator, a script or an attacker could send: texts of
any code point (controls, NUL, lone surrogates, C1), times in every year Python holds
with offsets up to +-14 h, shapes with and without GPUs. Each body is posted to the
API on the demo fleet; a body refused is refused with a 4xx and leaves nothing behind,
and a commitment stored is read back whole by each reader: a fresh knowledge load (no
row skipped), the list and show APIs, ``/metrics``, the dashboard's fleet and host
pages, and ``cortex-manage commitments show``. Derandomized: the same examples each run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from cortex.cmd import manage
from cortex.db import models
from cortex.knowledge.commitments import parse_time
from tests.api.conftest import demo_app

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)
#: Texts a reader must hold: any code point but controls and lone surrogates.
STORABLE_TEXT = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1,
                        max_size=40)
ZONES = st.sampled_from([UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-14)),
                         timezone(timedelta(hours=5, minutes=30))])
ANY_TIME = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59),
                 timezones=ZONES).map(datetime.isoformat),
    ANY_TEXT)
FUTURE = st.datetimes(min_value=datetime(2100, 1, 1), max_value=datetime(9999, 12, 31),
                      timezones=ZONES).map(datetime.isoformat)
PAST = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2020, 1, 1),
                    timezones=ZONES).map(datetime.isoformat)


def often(good, bad):
    """Mostly ``good`` values, sometimes ``bad`` ones (so both sides are reached)."""
    return st.one_of(good, good, good, bad)


BODIES = st.fixed_dictionaries(
    {"project_id": often(st.one_of(st.just("a" * 32), STORABLE_TEXT), ANY_TEXT),
     "vcpus": st.integers(1, 16), "memory_mb": st.integers(1, 65536),
     "count": st.integers(1, 3), "end_at": often(FUTURE, ANY_TIME)},
    optional={"availability_zone": often(st.sampled_from([None, "az-1", "az-2"]), ANY_TEXT),
              "gpus": st.integers(0, 2), "products": st.lists(
                  st.sampled_from(["2330", "20B5", "233a"]), max_size=2),
              "start_at": often(PAST, ANY_TIME),
              "description": often(st.one_of(st.none(), STORABLE_TEXT), ANY_TEXT)})


@pytest.fixture(scope="module")
def served():
    with demo_app("commitment_properties") as found:
        yield found


def stored(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(models.Commitment)).scalar()


def test_every_accepted_commitment_reads_back_through_every_reader(served, monkeypatch,
                                                                   capsys):
    url, engine, app = served
    client = app.test_client()
    knowledge = app.extensions["cortex"].knowledge
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    outcomes: list[int] = []

    @settings(max_examples=60, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(body=BODIES)
    def write_and_read(body):
        answer = client.post("/v1/commitments", json=body)
        outcomes.append(answer.status_code)
        if answer.status_code != 201:
            assert answer.status_code in (400, 409), answer.get_data(as_text=True)
            assert "Traceback" not in answer.get_data(as_text=True)
            assert stored(engine) == 0
            return
        made = answer.get_json()
        try:
            assert made["project_id"] == body["project_id"]
            assert made["description"] == body.get("description")
            assert made["end_at"] == parse_time(body["end_at"], "end_at").isoformat()
            knowledge.refresh(force=True)
            view = knowledge.view()
            assert not view.skipped_rows
            assert [c.id for c in view.commitments] == [made["id"]]
            assert client.get(f"/v1/commitments/{made['id']}").get_json() == made
            assert client.get("/v1/commitments").get_json()["commitments"] == [made]
            assert client.get("/metrics").status_code == 200
            assert client.get("/ui").status_code == 200
            for host in {h["host"] for h in made["holds"]}:
                assert client.get(f"/ui/hosts/{host}").status_code == 200
            assert manage.main(["commitments", "show", made["id"], "-f", "json"]) == 0
            shown = json.loads(capsys.readouterr().out)
            assert {k: shown[k] for k in ("project_id", "description", "start_at", "end_at")} \
                == {k: made[k] for k in ("project_id", "description", "start_at", "end_at")}
        finally:
            assert client.delete(f"/v1/commitments/{made['id']}").status_code == 204

    write_and_read()
    # both sides of the bounds were reached, each often
    assert outcomes.count(201) >= 10 and outcomes.count(400) >= 10, sorted(outcomes)

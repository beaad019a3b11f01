"""Group promises through the API: the answer, GET /v1/reservations, the record, /metrics.

cmp0007 of the demo fleet has room for three of FLAVOR (tests/api/test_reservations.py).
"""

import pytest
from sqlalchemy import delete

from cortex.api.app import create_app
from cortex.db import models
from tests.api.conftest import make_conf, stop_app
from tests.api.test_contract import post
from tests.api.test_reservations import FLAVOR, HOST
from tests.fakes import nova_body
from tests.waiting import DEADLINE


def empty(engine):
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))
        connection.execute(delete(models.GroupPromise))


@pytest.fixture
def reserving(engine, database_url):
    empty(engine)
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "database.knowledge_check_interval": 0.0,
                                  "scheduler.reservation_ttl": 600.0}), engine=engine)
    assert app.extensions["cortex"].reservations.refresh(DEADLINE)
    yield app
    stop_app(app)
    empty(engine)


def member(client, request_id, index, members):
    body = nova_body(hosts=[HOST], flavor=FLAVOR,
                     spec={"instance_uuid": f"{request_id}-{index}", "num_instances": members},
                     context={"request_id": request_id})
    response = post(client, "nova", body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response


def test_a_group_that_does_not_fit_whole_is_refused_and_one_that_fits_is_listed(reserving):
    client = reserving.test_client()
    assert member(client, "req-four", 0, 4).get_json()["hosts"] == []
    listed = client.get("/v1/reservations").get_json()
    assert listed == {"groups": [], "reservations": []}
    response = member(client, "req-three", 0, 3)
    assert response.get_json()["hosts"] == [HOST]
    listed = client.get("/v1/reservations").get_json()
    [group] = listed["groups"]
    assert (group["key"], group["members"], group["placed"], group["hosts"]) == (
        "request:req-three", 3, 3, [HOST] * 3)
    assert sorted(r["id"] for r in listed["reservations"]) == sorted(group["reservations"])
    for index in (1, 2):
        assert member(client, "req-three", index, 3).get_json()["hosts"] == [HOST]
    assert len(client.get("/v1/reservations").get_json()["reservations"]) == 3
    decision_id = response.headers["x-cortex-decision-id"]
    reserving.extensions["cortex"].decisions.flush(DEADLINE)
    record = client.get(f"/v1/decisions/{decision_id}").get_json()
    step = next(s for s in record["steps"] if s["name"] == "inflight_reservations")
    assert step["detail"].startswith("promised group") and '"expires_at"' in step["detail"]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'cortex_group_placements_total{outcome="refused_whole",service="nova"} 1.0' in metrics
    assert 'cortex_group_placements_total{outcome="placed",service="nova"} 1.0' in metrics

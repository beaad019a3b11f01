"""Request shapes of live calls are kept, and a fresh worker warms with them."""

import copy

import pytest
from sqlalchemy import text

from cortex.api.app import create_app
from cortex.pipeline import memo
from cortex.services.warmup import SHAPES, warm_up
from cortex.store.shapes import ShapeStore
from tests.api.conftest import make_conf, stop_app
from tests.conftest import FIXTURES, demo_database, load_body

BODY = load_body(FIXTURES / "nova" / "gpu-2xh100-pinned.json")


@pytest.fixture
def shapes_database():
    """``(url, engine)``: a demo-fleet database of this test's own."""
    with demo_database("shapes") as found:
        yield found


def app_on(url, engine, **overrides):
    return create_app(make_conf(**{"database.connection": url, "api.warm_up_shapes": 16}
                                | overrides), engine=engine)


def stored(engine) -> list[tuple[str, dict]]:
    with engine.connect() as connection:
        return [(row[0], row[1]) for row in connection.execute(
            text("SELECT service, body FROM request_shapes ORDER BY last_seen"))]


def other_flavor(body: dict) -> dict:
    changed = copy.deepcopy(body)
    flavor = changed["spec"]["nova_object.data"]["flavor"]["nova_object.data"]
    flavor["vcpus"] += 8
    return changed


def post(client, body):
    answer = client.post("/scheduler/nova/external", json=body)
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()["hosts"]


def test_a_shape_is_stored_once_without_its_hosts(shapes_database):
    url, engine = shapes_database
    app = app_on(url, engine)
    client = app.test_client()
    again = copy.deepcopy(BODY)
    again["spec"]["nova_object.data"]["instance_uuid"] = "11111111-2222-3333-4444-555555555555"
    for body in (BODY, again, BODY, other_flavor(BODY)):
        post(client, body)
    simulated = client.post("/v1/scheduler/nova/simulate", json=other_flavor(other_flavor(BODY)))
    assert simulated.status_code == 200, simulated.get_json()
    app.extensions["cortex"].shapes.close()
    rows = stored(engine)
    assert [service for service, _ in rows] == ["nova", "nova"]
    assert all("hosts" not in body and "weights" not in body for _, body in rows)
    assert rows[0][1]["spec"] == BODY["spec"]
    stop_app(app)


def test_a_fresh_worker_replays_the_stored_shapes_first(shapes_database):
    url, engine = shapes_database
    first = app_on(url, engine)
    post(first.test_client(), other_flavor(BODY))
    first.extensions["cortex"].shapes.close()
    stop_app(first)

    fresh = app_on(url, engine)
    services = fresh.extensions["cortex"]
    asked = []
    schedule = services.scheduler.schedule
    services.scheduler.schedule = lambda request, options, *args: (
        asked.append(request) or schedule(request, options, *args))
    warm_up(fresh)
    services.scheduler.schedule = schedule
    assert len(asked) == len(SHAPES) + 1
    assert {c.host for c in asked[-1].candidates} == set(services.knowledge.current.hosts)
    store = memo.store_of(services.knowledge.current, memo.DEFAULT_LIMIT)
    tables = len(store._tables)
    post(fresh.test_client(), other_flavor(BODY))
    assert len(store._tables) == tables, "the live call found every step answer kept"
    post(fresh.test_client(), other_flavor(other_flavor(BODY)))
    assert len(store._tables) > tables, "a shape never seen makes new tables"
    services.shapes.close()
    assert len(stored(engine)) == 2, "the replayed shape is not stored again"
    stop_app(fresh)


def test_no_shapes_when_the_option_is_zero(shapes_database):
    url, engine = shapes_database
    app = app_on(url, engine, **{"api.warm_up_shapes": 0})
    post(app.test_client(), BODY)
    app.extensions["cortex"].shapes.close()
    assert stored(engine) == []
    stop_app(app)


def test_the_store_keeps_the_newest(shapes_database):
    _, engine = shapes_database
    store = ShapeStore(engine, keep=3)
    for number in range(5):
        store.save(f"shape-{number}", "nova", {"spec": {"n": number}, "hosts": ["h"]})
    assert [body["spec"]["n"] for _, body in store.newest(10)] == [4, 3, 2]
    assert store.newest(1) == [("nova", {"spec": {"n": 4}})]

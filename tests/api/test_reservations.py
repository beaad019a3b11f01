"""In-flight reservations and network hints through the API (one process, the session database)."""

import uuid
from contextlib import contextmanager
from datetime import timedelta
from types import MappingProxyType

import pytest
from sqlalchemy import delete

from cortex.api.app import create_app
from cortex.db import models
from cortex.knowledge.reservations import Reservation
from cortex.store.memory import HostLock
from tests.api.conftest import make_conf
from tests.api.test_contract import post
from tests.fakes import nova_body
from tests.waiting import DEADLINE

HOST = "cmp0007"  # nearly full: three of FLAVOR fit (tests/functional/test_reservations.py)
FLAVOR = {"vcpus": 2, "memory_mb": 3072, "root_gb": 40}


@pytest.fixture
def reserving(engine, database_url):
    # an app of another test built from a config file may have promised room already
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "database.knowledge_check_interval": 0.0,
                                  "scheduler.reservation_ttl": 600.0}), engine=engine)
    # the feed may not have seen the delete yet: wait until it has (False: it never did)
    assert app.extensions["cortex"].reservations.refresh(DEADLINE)
    yield app
    app.extensions["cortex"].decisions.close()
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))


def call(client, instance_uuid):
    body = nova_body(hosts=[HOST], flavor=FLAVOR, spec={"instance_uuid": instance_uuid})
    response = post(client, "nova", body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response


def test_answers_stop_naming_a_host_once_its_room_is_promised(reserving):
    client = reserving.test_client()
    answers = [call(client, str(uuid.uuid4())).get_json()["hosts"] for _ in range(5)]
    assert answers == [[HOST]] * 3 + [[]] * 2
    held = client.get("/v1/reservations").get_json()["reservations"]
    assert len(held) == 3 and {r["host"] for r in held} == {HOST}
    assert held[0]["resources"] == {"VCPU": 2, "MEMORY_MB": 3072, "DISK_GB": 40}
    decision_id = call(client, str(uuid.uuid4())).headers["x-cortex-decision-id"]
    reserving.extensions["cortex"].decisions.flush(DEADLINE)
    decision = client.get(f"/v1/decisions/{decision_id}").get_json()
    steps = {s["name"]: s for s in decision["steps"]}
    assert "VCPU" in steps["filter_has_enough_capacity"]["removed"][HOST]


def test_asking_again_for_the_same_instance_does_not_take_more_room(reserving):
    client = reserving.test_client()
    for _ in range(4):
        assert call(client, "11111111-2222-3333-4444-555555555555").get_json()["hosts"] == [HOST]
    assert len(client.get("/v1/reservations").get_json()["reservations"]) == 1


def test_simulate_promises_nothing(reserving):
    client = reserving.test_client()
    body = nova_body(hosts=[HOST], flavor=FLAVOR, spec={"instance_uuid": str(uuid.uuid4())})
    for _ in range(4):
        response = client.post("/v1/scheduler/nova/simulate", json=body)
        assert response.get_json()["hosts"] == [HOST]
    assert client.get("/v1/reservations").get_json()["reservations"] == []


def test_a_bad_network_hint_is_a_400_with_a_short_body(reserving):
    body = nova_body(spec={"scheduler_hints": {"placement_strategy": ["packed"]}})
    response = post(reserving.test_client(), "nova", body)
    assert response.status_code == 400
    assert "placement_strategy" in response.get_json()["errors"][0]["detail"]


def test_the_network_topology_endpoint_answers_the_view(reserving):
    document = reserving.test_client().get("/v1/network-topology").get_json()
    assert set(document) == {"spines", "leaves", "hosts"}


class RefusingStore:
    """A reservation store that finds every host already full, counting the tries."""

    def __init__(self):
        self.tried = []

    def active(self, now):
        return []

    @contextmanager
    def lock_host(self, host, now):
        self.tried.append(host)
        full = Reservation(f"full-{host}", host, None, None,
                           MappingProxyType({"VCPU": 10**6, "PCPU": 10**6, "MEMORY_MB": 10**9}),
                           (), now, now + timedelta(hours=1))
        yield HostLock(host, [full], lambda made: pytest.fail("a full host was promised"))

    def reserve_if_unchanged(self, made, now, expected, own):
        return False  # the full host's reservation was not counted: re-checked under the lock


def test_a_burst_of_refusals_answers_the_rest_unpromised(reserving):
    from cortex.scheduler.promise import MAX_PROMISE_TRIES

    store = reserving.extensions["cortex"].scheduler.reservations = RefusingStore()
    hosts = [f"cmp{i:04d}" for i in range(12)]
    body = nova_body(hosts=hosts, flavor=FLAVOR, spec={"instance_uuid": str(uuid.uuid4())})
    response = post(reserving.test_client(), "nova", body)
    assert response.status_code == 200
    answered = response.get_json()["hosts"]
    assert len(store.tried) == MAX_PROMISE_TRIES < len(hosts)
    assert not set(store.tried) & set(answered)     # refused hosts are taken out
    assert answered and len(answered) + MAX_PROMISE_TRIES <= len(hosts)

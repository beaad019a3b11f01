"""The API answers from synced knowledge: change usage in Placement, sync, the answer changes."""

from __future__ import annotations

import json

import pytest

from cortex.api.app import create_app
from cortex.sync.runner import run_source
from cortex.sync.sources import build_sources
from tests.conftest import FIXTURES, load_body
from tests.sync import cloud
from tests.sync.conftest import sync_conf


@pytest.fixture
def synced(placement, openstack, sync_engine, sync_database_url):
    """The test cloud synced (Nova, Placement) and an API app on the sync database."""
    roots = cloud.build(placement, openstack.cloud)
    openstack.cloud.placement_url = placement.url
    conf = sync_conf(sync_database_url, openstack, database__knowledge_check_interval=0.0,
                     api__auth_strategy="noauth")  # ?detail=1 and /metrics need a role
    sources = {s.name: s for s in build_sources(conf, ("nova", "placement"))}
    for source in sources.values():
        assert run_source(sync_engine, source).ok
    app = create_app(conf, engine=sync_engine)
    yield app.test_client(), sources, roots
    app.extensions["cortex"].decisions.close()


def post(client, body):
    response = client.post("/scheduler/nova/external", data=json.dumps(body),
                           content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["hosts"], response.headers["x-cortex-decision-id"]


def reloaded(client):
    """Let the app's worker notice the new knowledge version and finish loading it."""
    knowledge = client.application.extensions["cortex"].knowledge
    knowledge.view()               # the check is due (interval 0): starts the reload
    knowledge.wait_for_refresh(10)


def test_answer_changes_when_placement_usage_changes(synced, placement, openstack, sync_engine):
    client, sources, roots = synced
    body = load_body(FIXTURES / "nova" / "gpu-8xh100-full-node.json")
    unknown = ["cmp0004", "cmp0005", "cmp0006", "cmp0007"]

    hosts, _ = post(client, body)
    # cmp0002 is disabled, cmp0003 has no PCPU; the others are unknown to the synced cloud
    assert set(hosts) == {"cmp0000", "cmp0001", *unknown}
    assert hosts[-4:] == sorted(unknown, key=lambda h: -body["weights"][h])

    server = "dddddddd-0000-0000-0000-000000000000"
    cloud.boot(placement, openstack.cloud, server, "cmp0001",
               {roots["cmp0001"]: {"PCPU": 100, "MEMORY_MB": 65536}})
    assert run_source(sync_engine, sources["placement"]).changed > 0
    reloaded(client)

    hosts, decision_id = post(client, body)
    assert "cmp0001" not in hosts and "cmp0000" in hosts
    services = client.application.extensions["cortex"]
    services.decisions.close()  # flush the decision writer
    steps = services.decision_store.get(decision_id).steps
    capacity = [s for s in steps if s.name == "filter_has_enough_capacity"][0]
    assert "PCPU" in capacity.removed["cmp0001"]

    cloud.delete(placement, openstack.cloud, server)  # moves no generation
    assert run_source(sync_engine, sources["placement"]).changed > 0
    reloaded(client)
    assert "cmp0001" in post(client, body)[0]


def test_healthcheck_and_metrics_report_knowledge_age(synced):
    client, _, _ = synced
    detail = client.get("/healthcheck?detail=1")
    assert detail.status_code == 200 and detail.is_json
    sources = detail.get_json()["sources"]
    assert set(sources) == {"nova", "placement"}
    assert all(0 <= s["age_seconds"] < 120 and s["consecutive_failures"] == 0
               for s in sources.values())
    assert detail.get_json()["knowledge_version"] >= 1
    assert client.get("/healthcheck").get_data(as_text=True) == "OK"
    metrics = client.get("/metrics").get_data(as_text=True)
    ages = [line for line in metrics.splitlines()
            if line.startswith("cortex_knowledge_age_seconds{")]
    # the worker's own view age ("database") and one sample per synced source
    assert sorted(line.split('"')[1] for line in ages) == ["database", "nova", "placement"]

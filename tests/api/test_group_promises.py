"""Group promises through the API: the answer, GET /v1/reservations, the record, /metrics.

cmp0007 of the demo fleet has room for three of FLAVOR (tests/api/test_reservations.py);
the Kubernetes cluster is tests/api/test_kubernetes.py's: sixteen HGX H100 nodes, gpu-01
with 2 GPUs in use and gpu-02 all 8, leaves 1+2 and 3+4 adjacent pairs.
"""

import pytest
from sqlalchemy import delete

from cortex.api.app import create_app
from cortex.db import models
from tests.api.conftest import make_conf, stop_app
from tests.api.test_contract import post
from tests.api.test_kubernetes import NODES, FakeKubernetes, cluster  # noqa: F401 - a fixture
from tests.api.test_kubernetes import body as kubernetes_body
from tests.api.test_kubernetes import post as kubernetes_post
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


@pytest.fixture
def extender(cluster):  # noqa: F811 - the imported fixture
    """An app on the Kubernetes cluster of tests/api/test_kubernetes.py whose API server
    also serves the PodGroup ``ml-team/llm-train`` with ``minMember`` 8."""
    url, engine = cluster
    fake = FakeKubernetes()
    served = []

    def pod_group(namespace, name):
        served.append(f"{namespace}/{name}")
        return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"minMember": 8}}

    fake._server.app.add_url_rule(
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/<namespace>/podgroups/<name>",
        view_func=pod_group)
    app = create_app(make_conf(**{
        "database.connection": url, "database.knowledge_check_interval": 0.0,
        "scheduler.reservation_ttl": 300.0, "kubernetes.api_url": fake.url,
        "kubernetes.nodes_from_reports": True}), engine=engine)
    yield app.test_client(), fake, served
    stop_app(app)
    fake.close()
    empty(engine)


def gang_pod(index, nodes):
    """Member ``index`` of pod group llm-train (8 GPUs), sized by its PodGroup alone."""
    args = kubernetes_body("filter-node-names.json")
    metadata = args["Pod"]["metadata"]
    metadata.update(name=f"train-{index}", uid=f"7f9c0000-0000-4000-8000-0000000002{index:02d}")
    del metadata["annotations"]["topology.cortex.dev/pod-group-size"]
    args["NodeNames"] = list(nodes)
    return args


def test_a_pod_group_of_8_with_min_member_8_is_refused_whole_or_placed_whole(extender):
    client, fake, served = extender
    # two whole free boards among the four offered: every node failed, nothing promised
    status, answer = kubernetes_post(client, "filter", gang_pod(0, NODES[:4]))
    assert status == 200 and answer["NodeNames"] == []
    for node in ("gpu-00", "gpu-03"):
        assert "2 of 8 members fit (min_count 8)" in answer["FailedNodes"][node]
    assert client.get("/v1/reservations").get_json() == {"groups": [], "reservations": []}
    assert served == ["ml-team/llm-train"]  # read once, kept by the worker
    placed = []
    for index in range(8):
        args = gang_pod(index, NODES)
        status, answer = kubernetes_post(client, "filter", args)
        assert status == 200 and answer["Error"] == "", answer
        if index == 0:  # the whole group's room is held at its first member's filter
            [group] = client.get("/v1/reservations").get_json()["groups"]
            assert (group["members"], group["placed"], group["min_count"]) == (8, 8, 8)
            assert sorted(group["hosts"]) == NODES[8:16]
        args["NodeNames"] = answer["NodeNames"]
        status, scores = kubernetes_post(client, "prioritize", args)
        best = max(scores, key=lambda p: (p["Score"], -NODES.index(p["Host"])))["Host"]
        status, bound = kubernetes_post(client, "bind", {
            "PodName": f"train-{index}", "PodNamespace": "ml-team",
            "PodUID": args["Pod"]["metadata"]["uid"], "Node": best})
        assert bound == {"Error": ""}
        placed.append(best)
    assert placed == group["hosts"]  # each member bound where its room was promised
    assert served == ["ml-team/llm-train"]

"""The kube-scheduler extender: filter, prioritize and bind as kube-scheduler calls them.

Sixteen Kubernetes nodes, each an HGX H100 board known only by its cortex-agent
report, on four leaves (two adjacent pairs, one per spine); gpu-01 has 2 GPUs in use,
gpu-02 all 8. One more node, mig-00, is an A100 board split into MIG instances, on no
leaf. The recorded bodies in ``tests/fixtures/kubernetes`` have the upstream wire shape
(``k8s.io/kube-scheduler/extender/v1``: Go field names, no JSON tags). A fake API
server takes the Bindings and refuses a second one for a bound pod, as the real one does.
"""

from __future__ import annotations

import copy
import json
import threading
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from flask import Flask, jsonify, request
from sqlalchemy import select
from werkzeug.serving import make_server

from cortex.api.app import create_app
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.db.models import Decision, GpuDemand
from cortex.knowledge.network import parse_topology
from cortex.request.base import BadRequest
from cortex.request.kubernetes import field, node_refusal, parse_args, pod_spec, quantity
from cortex.scheduler.service import SchedulingFailed
from cortex.services.kubernetes import scaled_scores
from cortex.store.fleet import topology_report
from cortex.store.network import store_topology
from cortex.store.reports import store_report
from tests.api.conftest import make_conf, stop_app
from tests.conftest import FIXTURES, REPO, _create_postgres_database, _drop_postgres_database
from tests.waiting import DEADLINE

NODES = [f"gpu-{i:02d}" for i in range(16)]
HGX = json.loads((REPO / "etc/cortex/topology/hgx-h100-8gpu.json").read_text())
for _cell in HGX["numa_cells"]:  # a Kubernetes node: no nova.conf CPU sets, all CPUs shared
    _cell.update(shared_cpus=_cell["cpus"], dedicated_cpus="")
GPUS = [g["pci_address"] for g in HGX["gpus"]]
A100_MIG = json.loads((REPO / "etc/cortex/topology/a100-mig-4gpu.json").read_text())
for _cell in A100_MIG["numa_cells"]:
    _cell.update(shared_cpus=_cell["cpus"], dedicated_cpus="")
BODIES = FIXTURES / "kubernetes"


def body(name: str) -> dict:
    return json.loads((BODIES / name).read_text())


class FakeKubernetes:
    """The API server's pod read and binding create, on a loopback port.

    A Binding for a pod already bound is refused with 409, as the API server refuses
    one for a pod that has ``spec.nodeName``; ``rebind`` accepts it all the same.
    """

    def __init__(self) -> None:
        self.bindings: list[tuple[str, dict]] = []
        self.bound: dict[str, str] = {}
        self.refuse = False
        self.rebind = False
        app = Flask("fake-kubernetes")

        @app.post("/api/v1/namespaces/<namespace>/pods/<name>/binding")
        def binding(namespace, name):
            pod = f"{namespace}/{name}"
            if self.refuse or (pod in self.bound and not self.rebind):
                return jsonify(kind="Status", code=409, message="pod already bound"), 409
            self.bindings.append((pod, request.get_json()))
            self.bound[pod] = request.get_json()["target"]["name"]
            return jsonify(kind="Status", status="Success", code=201), 201

        @app.get("/api/v1/namespaces/<namespace>/pods/<name>")
        def pod(namespace, name):
            spec = {"containers": []}
            if f"{namespace}/{name}" in self.bound:
                spec["nodeName"] = self.bound[f"{namespace}/{name}"]
            return jsonify(apiVersion="v1", kind="Pod", spec=spec,
                           metadata={"name": name, "namespace": namespace})

        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()


@pytest.fixture(scope="module")
def cluster():
    """``(url, engine)``: the sixteen nodes' reports and their leaves, nothing of Nova."""
    url = _create_postgres_database("kubernetes")
    engine = make_engine(url)
    migrate.upgrade(engine)
    now = datetime.now(UTC)
    used = {"gpu-01": GPUS[:2], "gpu-02": GPUS}
    with engine.begin() as connection:
        for node in NODES:
            store_report(connection, node, topology_report(
                {"report": copy.deepcopy(HGX), "gpus_in_use": used.get(node, [])}), now)
        store_report(connection, "mig-00", topology_report(
            {"report": copy.deepcopy(A100_MIG), "gpus_in_use": []}), now)
        leaves = {f"leaf-{n}": {"spine": f"spine-{1 + (n - 1) // 2}", "uplink_gbps": 1600,
                                "hosts": NODES[(n - 1) * 4:n * 4],
                                "adjacent": [f"leaf-{n + 1 if n % 2 else n - 1}"]}
                  for n in range(1, 5)}
        store_topology(connection, parse_topology(
            {"spines": {"spine-1": {"uplink_gbps": 3200}, "spine-2": {"uplink_gbps": 3200}},
             "leaves": leaves}))
    yield url, engine
    engine.dispose()
    _drop_postgres_database(url)


@contextmanager
def kubernetes_api(cluster):
    """``(client, fake, app)``: an app on the cluster's database that asks a fake API server.

    Afterwards the app and the fake are stopped and what the app wrote (reservations,
    promises, demand, decisions) is deleted.
    """
    url, engine = cluster
    fake = FakeKubernetes()
    app = create_app(make_conf(**{
        "database.connection": url, "database.knowledge_check_interval": 0.0,
        "scheduler.reservation_ttl": 300.0, "kubernetes.api_url": fake.url,
        "kubernetes.nodes_from_reports": True}), engine=engine)
    try:
        yield app.test_client(), fake, app
    finally:
        stop_app(app)
        fake.close()
        with engine.begin() as connection:
            for table in ("inflight_reservations", "group_promises", "gpu_demand", "decisions"):
                connection.exec_driver_sql(f"DELETE FROM {table}")


@pytest.fixture
def api(cluster):
    with kubernetes_api(cluster) as built:
        yield built


@pytest.fixture(scope="module")
def refusing_api(cluster):
    """One app for the module's tests whose pods every node refuses or whose call is a 400.

    Such answers reserve, promise and record no demand, so the tests share one app
    instead of building one each (about a second apiece).
    """
    with kubernetes_api(cluster) as built:
        yield built


def post(client, verb: str, document) -> tuple[int, object]:
    answer = client.post(f"/scheduler/kubernetes/{verb}", json=document)
    return answer.status_code, answer.get_json()


def test_filter_with_node_objects_answers_a_node_list_in_the_upstream_casing(api):
    client, _, _ = api
    args = body("filter-nodes.json")
    args["Nodes"]["items"][3]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-L40S"
    status, answer = post(client, "filter", args)
    assert status == 200
    assert list(answer) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes",
                            "Error"]
    assert answer["NodeNames"] is None and answer["Error"] == ""
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["gpu-00", "gpu-01"]
    assert answer["Nodes"]["items"][0] == args["Nodes"]["items"][0]  # the objects sent
    assert "filter_gpu_capacity" in answer["FailedNodes"]["gpu-02"]  # all 8 GPUs in use
    assert answer["FailedAndUnresolvableNodes"] == {
        "gpu-03": "node selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 does not match"}


def test_node_labels_join_the_knowledge_once(api, cluster):
    client, _, app = api
    knowledge = app.extensions["cortex"].knowledge
    args = body("filter-nodes.json")
    args["Nodes"]["items"][1]["metadata"]["labels"]["topology.kubernetes.io/zone"] = "az-2"
    assert post(client, "filter", args)[0] == 200
    knowledge.refresh(force=True)  # the background reload, now
    view = knowledge.view()
    assert view.hosts["gpu-00"].availability_zone == "az-1"
    assert view.hosts["gpu-01"].availability_zone == "az-2"
    assert view.hosts["gpu-00"].labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert view.hosts["gpu-04"].labels == {}  # not offered as an object yet
    version = view.version
    assert post(client, "filter", args)[0] == 200  # the same labels: nothing written
    knowledge.refresh()
    assert knowledge.view().version == version
    with cluster[1].begin() as connection:
        connection.exec_driver_sql("DELETE FROM kubernetes_nodes")


def test_keys_are_read_as_go_reads_them_case_insensitively(api):
    client, _, _ = api
    args = body("filter-node-names.json")
    lowered = {"pod": args["Pod"], "nodes": None, "nodenames": args["NodeNames"]}
    assert post(client, "filter", lowered) == post(client, "filter", args)


def test_filter_with_names_only_answers_names(api):
    client, _, _ = api
    args = body("filter-node-names.json")
    del args["Pod"]["metadata"]["labels"]  # a pod of no group
    status, answer = post(client, "filter", args)
    assert status == 200 and answer["Nodes"] is None
    # an 8-GPU pod fits only the two boards with all their GPUs free
    assert answer["NodeNames"] == ["gpu-00", "gpu-03"]
    assert set(answer["FailedNodes"]) == {"gpu-01", "gpu-02"}
    # as one of its pod group of eight (the fixture's), it is refused whole
    status, answer = post(client, "filter", body("filter-node-names.json"))
    assert status == 200 and answer["NodeNames"] == []
    assert set(answer["FailedNodes"]) == {"gpu-00", "gpu-01", "gpu-02", "gpu-03"}
    assert "2 of 8 members fit" in answer["FailedNodes"]["gpu-00"]


def test_prioritize_scores_every_offered_node_once_from_0_to_10(api):
    client, _, _ = api
    status, answer = post(client, "prioritize", body("filter-nodes.json"))
    assert status == 200 and [p["Host"] for p in answer] == ["gpu-00", "gpu-01", "gpu-02",
                                                             "gpu-03"]
    scores = {p["Host"]: p["Score"] for p in answer}
    assert all(isinstance(s, int) and 0 <= s <= 10 for s in scores.values())
    assert scores["gpu-02"] == 0  # removed by the pipeline
    # a 2-GPU pod goes where the board is broken up already: gpu-01, keeping gpu-00 whole
    assert scores["gpu-01"] == 10 and scores["gpu-00"] < 10


def test_scaled_scores():
    assert scaled_scores(["a", "b", "c"], {"a": 3.0, "b": 2.0, "c": 1.0}) == {
        "a": 10, "b": 5, "c": 0}
    assert scaled_scores(["a", "b"], {"a": 1.0, "b": 1.0}) == {"a": 10, "b": 10}
    assert scaled_scores(["a", "x"], {"a": 1.0}) == {"a": 10, "x": 0}


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("Pod"), "'Pod' is a required property"),
    (lambda a: a.update(NodeNames=[7], Nodes=None), "NodeNames"),
    (lambda a: a.update(NodeNames=["gpu-00"]), "exactly one of Nodes and NodeNames"),
    (lambda a: a.update(Nodes=None), "exactly one of Nodes and NodeNames"),
    (lambda a: a.update(Nodes={"items": [{"metadata": {}}]}), "'name' is a required property"),
])
def test_bad_arguments_get_400_with_a_json_error(refusing_api, change, message):
    client, _, _ = refusing_api
    args = body("filter-nodes.json")
    change(args)
    status, answer = post(client, "filter", args)
    assert status == 400 and message in answer["errors"][0]["detail"]


def test_a_failure_inside_answers_200_with_error_set(api, monkeypatch):
    client, _, app = api
    services = app.extensions["cortex"]

    def unavailable(*args, **kwargs):
        raise SchedulingFailed(503, "knowledge unavailable: database unreachable", None, None)

    monkeypatch.setattr(services.scheduler, "schedule", unavailable)
    status, answer = post(client, "filter", body("filter-node-names.json"))
    assert status == 200 and answer["Error"] == "knowledge unavailable: database unreachable"
    assert answer["NodeNames"] is None and answer["Nodes"] is None
    status, answer = post(client, "prioritize", body("filter-node-names.json"))
    assert status == 200 and {p["Score"] for p in answer} == {0}
    status, answer = post(client, "bind", body("bind.json"))
    assert status == 200 and "knowledge unavailable" in answer["Error"]


def test_bad_binding_arguments_get_400(api):
    client, fake, _ = api
    status, answer = post(client, "bind", {"PodName": "x", "podnamespace": "y", "PodUID": ""})
    assert status == 400 and "Node" in answer["errors"][0]["detail"] and fake.bindings == []


def test_bind_promises_the_node_and_creates_the_binding(api):
    client, fake, _ = api
    post(client, "filter", body("filter-nodes.json"))  # kube-scheduler filters first
    status, answer = post(client, "bind", body("bind.json"))
    assert (status, answer) == (200, {"Error": ""})
    ((pod, binding),) = fake.bindings
    assert pod == "ml-team/infer-7f9c"
    assert binding["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-01"}
    assert binding["metadata"]["uid"] == "7f9c0000-0000-4000-8000-000000000001"
    reservations = client.get("/v1/reservations").get_json()["reservations"]
    (promised,) = [r for r in reservations if r["host"] == "gpu-01"]
    assert promised["instance_uuid"] == "7f9c0000-0000-4000-8000-000000000001"
    assert len(promised["gpus"]) == 2


def test_bind_refuses_a_node_that_no_longer_fits_and_reports_the_api_server(api):
    client, fake, _ = api
    post(client, "filter", body("filter-nodes.json"))
    status, answer = post(client, "bind", dict(body("bind.json"), Node="gpu-02"))
    assert status == 200 and "no longer fits" in answer["Error"]
    fake.refuse = True
    status, answer = post(client, "bind", body("bind.json"))
    assert status == 200 and "409" in answer["Error"] and fake.bindings == []


def test_a_gang_of_8_lands_in_one_pair_of_adjacent_leaves(api):
    """Drive filter, prioritize and bind for each member, as kube-scheduler would."""
    client, fake, _ = api
    template = body("filter-node-names.json")
    placed = []
    for index in range(8):
        args = copy.deepcopy(template)
        args["Pod"]["metadata"].update(name=f"train-{index}",
                                       uid=f"7f9c0000-0000-4000-8000-0000000001{index:02d}")
        args["NodeNames"] = NODES
        status, filtered = post(client, "filter", args)
        assert status == 200 and filtered["Error"] == "", filtered
        args["NodeNames"] = filtered["NodeNames"]
        status, priorities = post(client, "prioritize", args)
        best = max(priorities, key=lambda p: (p["Score"], -NODES.index(p["Host"])))["Host"]
        status, bound = post(client, "bind", {
            "PodName": f"train-{index}", "PodNamespace": "ml-team",
            "PodUID": args["Pod"]["metadata"]["uid"], "Node": best})
        assert bound == {"Error": ""}
        placed.append(best)
    assert len(set(placed)) == 8
    # leaves 1 and 2 hold only seven whole free boards (gpu-01, gpu-02 are in use)
    assert sorted(placed) == NODES[8:16]
    assert [b["target"]["name"] for _, b in fake.bindings] == placed


def test_pods_in_nova_terms():
    pod = body("filter-node-names.json")["Pod"]
    call = parse_args({"Pod": pod, "NodeNames": ["a", "b", "a"]})
    assert call.node_names == ("a", "b")
    spec = pod_spec(call)["spec"]["nova_object.data"]
    assert spec["flavor"]["nova_object.data"]["vcpus"] == 64
    assert spec["flavor"]["nova_object.data"]["memory_mb"] == 512 * 1024
    assert spec["pci_requests"]["nova_object.data"]["requests"][0]["nova_object.data"][
        "count"] == 8
    assert spec["scheduler_hints"] == {"group_size": ["8"], "placement_strategy": [
        "consolidated"], "latency_sensitive": ["true"], "group_id": ["pod-group:llm-train"]}
    mig = copy.deepcopy(pod)
    mig["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-3g.40gb": "2"}
    mig["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m", "memory": "1Gi"}
    flavor = pod_spec(parse_args({"Pod": mig, "NodeNames": ["a"]}))["spec"][
        "nova_object.data"]["flavor"]["nova_object.data"]
    assert flavor["vcpus"] == 1 and flavor["extra_specs"] == {
        "resources:VGPU": "2", "trait:CUSTOM_NVIDIA_3G_40GB": "required"}
    assert quantity("64Gi", "m") == 64 * 2**30 and quantity("250m", "c") * 4 == 1
    with pytest.raises(BadRequest):
        quantity("lots", "x")
    assert field({"NodeNames": 1}, "nodenames") == 1 and field({"nodeNames": 2}, "NodeNames") == 2


def test_node_affinity_is_read_as_the_node_affinity_plugin_reads_it():
    pod = {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                  {"key": "gpus", "operator": "Gt", "values": ["4"]}]},
            {"matchExpressions": [{"key": "special", "operator": "Exists"}]}]}}}}}

    def node(**labels):
        return {"metadata": {"labels": labels}}

    assert node_refusal(pod, node(zone="a", gpus="8")) is None
    assert node_refusal(pod, node(zone="a", gpus="2")) is not None
    assert node_refusal(pod, node(zone="c", gpus="8")) is not None
    assert node_refusal(pod, node(special="")) is None  # the second term, ORed


def placed_demand(app, uid: str) -> list[tuple[str, str, int]]:
    """``(outcome, host, gpus)`` of the ``gpu_demand`` rows of the pod ``uid``'s decisions."""
    services = app.extensions["cortex"]
    services.decisions.flush(DEADLINE)
    with services.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(
            select(GpuDemand.outcome, GpuDemand.host, GpuDemand.gpus)
            .join(Decision, Decision.id == GpuDemand.decision_id)
            .where(Decision.resource_id == uid))]


def test_demand_is_recorded_once_when_the_pod_is_bound_never_when_judged(api):
    client, fake, app = api
    args = body("filter-nodes.json")
    uid = "7f9c0000-0000-4000-8000-000000000201"
    args["Pod"]["metadata"].update(name="infer-demand", uid=uid)
    for _ in range(20):  # kube-scheduler retries an unschedulable pod: each is a new cycle
        assert post(client, "filter", args)[0] == 200
        assert post(client, "prioritize", args)[0] == 200
    assert placed_demand(app, uid) == []
    bind = {"PodName": "infer-demand", "PodNamespace": "ml-team", "PodUID": uid,
            "Node": "gpu-01"}
    assert post(client, "bind", bind) == (200, {"Error": ""})
    assert placed_demand(app, uid) == [("placed", "gpu-01", 2)]
    # the answer was lost and kube-scheduler binds again: the API server refuses a second
    # Binding, the pod is seen on the node, the bind succeeds and counts nothing more
    assert post(client, "bind", bind) == (200, {"Error": ""})
    fake.rebind = True  # an API server that took a second Binding: still counted once
    assert post(client, "bind", bind) == (200, {"Error": ""})
    assert len(fake.bindings) == 2
    assert placed_demand(app, uid) == [("placed", "gpu-01", 2)]
    # bound elsewhere: not this bind's success
    fake.rebind, fake.bound["ml-team/infer-demand"] = False, "gpu-05"
    status, answer = post(client, "bind", bind)
    assert status == 200 and "gpu-05" in answer["Error"]
    assert placed_demand(app, uid) == [("placed", "gpu-01", 2)]


@pytest.mark.parametrize("annotation, value, allowed", [
    ("network-bandwidth", "high", "a positive number of Gbit/s"),
    ("placement-strategy", "random", "one of consolidated, distributed, balanced"),
    ("latency-sensitive", "maybe", "true or false"),
    ("pod-group-size", "0", "an integer 1..10000"),
    ("numa-policy", "strict", "one of legacy, preferred, required, socket"),
])
@pytest.mark.parametrize("fixture", ["filter-nodes.json", "filter-node-names.json"])
def test_a_bad_annotation_fails_the_pods_nodes_with_a_reason(refusing_api, fixture, annotation,
                                                              value, allowed):
    client, _, _ = refusing_api
    args = body(fixture)
    key = f"topology.cortex.dev/{annotation}"
    args["Pod"]["metadata"]["annotations"][key] = value
    offered = args["NodeNames"] or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
    status, answer = post(client, "filter", args)
    assert status == 200 and answer["Error"] == "" and answer["FailedNodes"] == {}
    assert set(answer["FailedAndUnresolvableNodes"]) == set(offered)
    for reason in answer["FailedAndUnresolvableNodes"].values():
        assert f"annotation {key}={value!r}" in reason and allowed in reason
    if fixture == "filter-node-names.json":
        assert answer["NodeNames"] == [] and answer["Nodes"] is None
    else:
        assert answer["Nodes"]["items"] == [] and answer["NodeNames"] is None
    status, answer = post(client, "prioritize", args)
    assert status == 200 and answer == [{"Host": n, "Score": 0} for n in offered]


def test_a_pod_the_rules_cannot_read_fails_its_nodes_not_the_call(api):
    client, _, _ = api
    args = body("filter-node-names.json")
    args["Pod"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1.5"
    status, answer = post(client, "filter", args)
    assert status == 200 and answer["NodeNames"] == []
    assert set(answer["FailedAndUnresolvableNodes"]) == set(args["NodeNames"])
    assert "not a whole number of GPUs" in answer["FailedAndUnresolvableNodes"]["gpu-00"]


def test_a_mig_pod_needs_mig_instances_of_its_profile(api):
    client, fake, _ = api
    args = body("filter-node-names.json")
    pod = args["Pod"]
    pod["metadata"].update(name="mig-0", uid="7f9c0000-0000-4000-8000-000000000301")
    pod["metadata"]["annotations"] = {}
    pod["metadata"]["labels"] = {}
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/mig-3g.40gb": "2"}}
    args["NodeNames"] = ["gpu-00", "mig-00"]
    status, answer = post(client, "filter", args)
    assert status == 200 and answer["Error"] == ""
    assert answer["NodeNames"] == ["mig-00"]
    reason = answer["FailedAndUnresolvableNodes"]["gpu-00"]
    assert "nvidia.com/mig-3g.40gb" in reason and "0 MIG 3g.40gb instances" in reason
    scores = {p["Host"]: p["Score"] for p in post(client, "prioritize", args)[1]}
    assert scores["gpu-00"] == 0
    status, answer = post(client, "bind", {"PodName": "mig-0", "PodNamespace": "ml-team",
                                           "PodUID": pod["metadata"]["uid"], "Node": "gpu-00"})
    assert "cannot hold the pod" in answer["Error"] and fake.bindings == []
    # a profile the MIG node is not split into
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-7g.80gb": "1"}
    status, answer = post(client, "filter", args)
    assert answer["NodeNames"] == [] and set(answer["FailedAndUnresolvableNodes"]) == {
        "gpu-00", "mig-00"}


def test_a_node_without_a_report_is_judged_by_its_own_allocatable(api):
    client, _, _ = api
    args = body("filter-nodes.json")
    template = args["Nodes"]["items"][0]
    extra = {}
    for name, allocatable in (("gpu-98", {"cpu": "64", "memory": "512Gi"}),
                              ("gpu-97", {"cpu": "64", "nvidia.com/gpu": "1"}),
                              ("gpu-96", {"cpu": "64", "nvidia.com/gpu": "8"})):
        node = copy.deepcopy(template)
        node["metadata"].update(name=name, uid=f"node-uid-{name}")
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["status"]["allocatable"] = allocatable
        extra[name] = node
    args["Nodes"]["items"] += list(extra.values())
    status, answer = post(client, "filter", args)
    assert status == 200 and answer["Error"] == ""
    passing = [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    assert "gpu-96" in passing and "gpu-97" not in passing and "gpu-98" not in passing
    unresolvable = answer["FailedAndUnresolvableNodes"]
    assert unresolvable["gpu-98"].startswith("Insufficient nvidia.com/gpu: 2 requested, 0")
    assert unresolvable["gpu-97"].startswith("Insufficient nvidia.com/gpu: 2 requested, 1")
    assert "gpu-96" not in unresolvable and "gpu-96" not in answer["FailedNodes"]
    # a node with a report is judged by the report, not by what its object says
    args["Nodes"]["items"][0]["status"]["allocatable"].pop("nvidia.com/gpu")
    status, answer = post(client, "filter", args)
    assert "gpu-00" in [n["metadata"]["name"] for n in answer["Nodes"]["items"]]

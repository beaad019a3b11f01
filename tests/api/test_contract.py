"""The callers' contract (shared/docs/caller-contract.md), status code by status code."""

import copy
import json
import logging

import pytest
from sqlalchemy.exc import OperationalError

from cortex.api.app import create_app
from cortex.api.schema import RequestValidator, load_openapi
from cortex.db.engine import make_engine
from cortex.pipeline.config import build_pipelines
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from tests.api.conftest import make_conf
from tests.conftest import FIXTURES, bodies, load_body
from tests.waiting import DEADLINE

ALL_BODIES = [(s, p) for s in ("nova", "cinder", "manila") for p in bodies(s)]
VALIDATOR = RequestValidator(load_openapi())


def post(client, service, body, **kwargs):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    kwargs.setdefault("content_type", "application/json")
    return client.post(f"/scheduler/{service}/external", data=data, **kwargs)


def assert_error(response, status):
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.is_json
    error = response.get_json()["errors"][0]
    assert error["status"] == status and error["detail"]
    assert error["request_id"] == response.headers["x-openstack-request-id"]
    assert "Traceback" not in response.get_data(as_text=True)
    return error


@pytest.mark.parametrize("service, path", ALL_BODIES, ids=lambda v: getattr(v, "stem", v))
def test_every_bundled_body_gets_a_valid_ranking(module_client, service, path):
    body = load_body(path)
    response = post(module_client, service, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type == "application/json"
    answer = response.get_json()
    assert VALIDATOR.response_errors(answer) == []
    asked = {h["host"] for h in body["hosts"]}
    assert set(answer["hosts"]) <= asked
    assert len(answer["hosts"]) == len(set(answer["hosts"]))
    assert answer["hosts"], "the demo fleet keeps at least one host for every bundled body"
    assert response.headers["x-openstack-request-id"].startswith("req-")
    assert response.headers["x-cortex-decision-id"]


@pytest.mark.parametrize("hosts", [["cmp0001", "cmp0000"], ["h\u00e9te"], [], ["a\ud800"]])
def test_the_answer_reads_as_flasks_jsonify_writes_it(hosts):
    from flask import Flask, jsonify

    from cortex.api.scheduler import answer

    with Flask("t").app_context():
        ours, flasks = answer(hosts), jsonify(hosts=hosts)
        assert ours.mimetype == "application/json" and ours.data.endswith(b"\n")
        assert json.loads(ours.data) == json.loads(flasks.data) == {"hosts": hosts}


@pytest.mark.parametrize("fixture, survivors", [
    ("nova/force-and-ignore-hosts", {"cmp0002", "cmp0004"}),
    ("nova/gpu-8xh100-full-node", {"cmp0000"}),
    ("nova/gpu-1xa100-numa", {"cmp0002"}),
    ("nova/gpu-2xh100-pinned", {"cmp0001"}),
    ("nova/gpu-4xl40s-required", {"cmp0004"}),
    ("nova/multi-create-anti-affinity", {"cmp0000", "cmp0001"}),
    ("nova/vgpu-mig-3g", {"cmp0003"}),
    ("nova/vmware-hana", {"nova-compute-bb0000", "nova-compute-bb0002"}),
    ("nova/cpu-general-purpose", {f"cmp000{i}" for i in (0, 1, 2, 3, 4, 7)}),
    ("cinder/retype-on-demand", {"cinder-volume-3@netapp-c#aggr_ssd_1"}),
])
def test_filters_remove_what_the_demo_fleet_rules_out(module_client, fixture, survivors):
    service, name = fixture.split("/")
    response = post(module_client, service, load_body(FIXTURES / service / f"{name}.json"))
    assert set(response.get_json()["hosts"]) == survivors


def test_unknown_hosts_are_kept_after_known_ones(client):
    body = load_body(FIXTURES / "nova" / "gpu-2xh100-pinned-1000-hosts.json")
    hosts = post(client, "nova", body).get_json()["hosts"]
    known = [h for h in hosts if int(h[3:]) < 50]
    assert hosts[:len(known)] == known and len(known) < 50
    unknown = hosts[len(known):]
    assert len(unknown) == 950
    weights = body["weights"]
    assert [weights[h] for h in unknown] == sorted((weights[h] for h in unknown), reverse=True)


def test_unknown_hosts_dropped_by_policy(engine, database_url):
    app = create_app(make_conf(**{"scheduler.unknown_host_policy": "drop"}), engine=engine)
    body = load_body(FIXTURES / "nova" / "gpu-2xh100-pinned-1000-hosts.json")
    hosts = post(app.test_client(), "nova", body).get_json()["hosts"]
    assert hosts and all(int(h[3:]) < 50 for h in hosts)
    app.extensions["cortex"].decisions.close()


def test_duplicated_host_with_several_nodes_is_answered_once(client):
    body = load_body(FIXTURES / "nova" / "vmware-hana.json")
    body["hosts"].insert(1, {"host": "nova-compute-bb0000",
                             "hypervisor_hostname": "second-cluster.cloud.example"})
    hosts = post(client, "nova", body).get_json()["hosts"]
    assert hosts.count("nova-compute-bb0000") == 1


def test_all_hosts_filtered_answers_empty_list_not_null(client):
    body = load_body(FIXTURES / "nova" / "cpu-general-purpose.json")
    body["spec"]["nova_object.data"]["force_hosts"] = ["cmp9999"]
    response = post(client, "nova", body)
    assert response.status_code == 200 and response.get_json() == {"hosts": []}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("service", ["nova", "cinder", "manila"])
def test_wrong_method_is_405_with_allow(module_client, method, service):
    response = module_client.open(f"/scheduler/{service}/external", method=method)
    assert_error(response, 405)
    assert response.headers["Allow"] == "POST"


def nova_body():
    return copy.deepcopy(load_body(FIXTURES / "nova" / "cpu-general-purpose.json"))


def mutate(change):
    body = nova_body()
    change(body)
    return body


@pytest.mark.parametrize("payload, fragment", [
    ("{not json", "not JSON"),
    (b"\xff\xfe\x00garbage", "not JSON"),
    ('{"hosts": [], "weights": {"a": NaN}}', "NaN"),
    ("[1, 2]", "is not of type 'object'"),
    (mutate(lambda b: b.pop("spec")), "'spec' is a required property"),
    (mutate(lambda b: b.update(hosts="cmp0001")), "hosts"),
    (mutate(lambda b: b["weights"].update(cmp0001="heavy")), "weights"),
    (mutate(lambda b: b["weights"].update(cmp0001=True)), "weights"),
    (mutate(lambda b: b["spec"]["nova_object.data"]["flavor"]["nova_object.data"].update(
        vcpus="four")), "vcpus"),
    (mutate(lambda b: b["weights"].pop("cmp0003")), "hosts without a weight: cmp0003"),
    (mutate(lambda b: b["weights"].update(cmp9999=1.0)), "weights for hosts not in 'hosts'"),
    (mutate(lambda b: b["spec"]["nova_object.data"]["flavor"]["nova_object.data"][
        "extra_specs"].update({"resources:VCPU": "many"})), "must be an integer"),
])
def test_bad_bodies_are_400(module_client, payload, fragment):
    error = assert_error(post(module_client, "nova", payload), 400)
    assert fragment in error["detail"]


def test_unknown_fields_are_tolerated(client):
    body = nova_body()
    body["future_field"] = {"x": 1}
    body["spec"]["nova_object.data"]["new_in_nova_2027"] = [1, 2]
    body["spec"]["nova_object.data"]["scheduler_hints"] = {"group": "scalar-from-old-nova"}
    assert post(client, "nova", body).status_code == 200


def test_not_json_content_type_is_415(client):
    response = post(client, "nova", json.dumps(nova_body()), content_type="text/plain")
    assert_error(response, 415)


def test_oversized_body_is_413(engine, database_url):
    app = create_app(make_conf(**{"api.max_body_bytes": 1000}), engine=engine)
    response = post(app.test_client(), "nova", nova_body())
    assert_error(response, 413)
    app.extensions["cortex"].decisions.close()


@pytest.mark.parametrize("pipeline, fragment", [
    ("no-such-pipeline", "unknown pipeline 'no-such-pipeline'"),
    ("cinder-external-scheduler", "is for cinder, not nova"),
])
def test_pipeline_that_cannot_be_chosen_is_400(client, pipeline, fragment):
    error = assert_error(post(client, "nova", nova_body() | {"pipeline": pipeline}), 400)
    assert fragment in error["detail"]


def test_explicit_pipeline_is_used(client, app):
    response = post(client, "nova", nova_body() | {"pipeline": "kvm-hana-bin-packing"})
    assert response.status_code == 200
    app.extensions["cortex"].decisions.flush(DEADLINE)
    decision = client.get(f"/v1/decisions/{response.headers['x-cortex-decision-id']}")
    assert decision.get_json()["pipeline"] == "kvm-hana-bin-packing"


@pytest.mark.parametrize("fixture, pipeline", [
    ("nova/vmware-hana", "vmware-hana-bin-packing"),
    ("nova/gpu-2xh100-pinned", "kvm-gpu-topology-aware"),
    ("nova/vgpu-mig-3g", "kvm-gpu-topology-aware"),
    ("nova/accel-device-profile", "kvm-gpu-topology-aware"),
    ("nova/cpu-general-purpose", "kvm-general-purpose-load-balancing"),
    ("cinder/create-volume-thin-qos", "cinder-external-scheduler"),
    ("manila/create-share-nfs", "manila-external-scheduler"),
])
def test_pipeline_is_inferred_from_the_request(module_client, fixture, pipeline):
    service, name = fixture.split("/")
    response = post(module_client, service, load_body(FIXTURES / service / f"{name}.json"))
    module_client.application.extensions["cortex"].decisions.flush(DEADLINE)
    decision = module_client.get(f"/v1/decisions/{response.headers['x-cortex-decision-id']}")
    assert decision.get_json()["pipeline"] == pipeline


def dead_engine():
    return make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none",
                       connect_args={"connect_timeout": 1})


def test_database_unreachable_without_any_view_is_503():
    app = create_app(make_conf(), engine=dead_engine())
    error = assert_error(post(app.test_client(), "nova", nova_body()), 503)
    assert "knowledge unavailable" in error["detail"]
    app.extensions["cortex"].decisions.close()


@register
class ExplodingFilter(Filter):
    """Test filter that raises."""

    name = "test_exploding_filter"

    def check(self, host, request, candidate):
        raise KeyError("surprise")


def exploding_app(engine, on_error):
    pipelines = build_pipelines({"defaults": {"nova": "p"}, "pipelines": {"p": {
        "service": "nova", "filters": [{"name": "test_exploding_filter",
                                        "on_error": on_error}]}}})
    return create_app(make_conf(), engine=engine, pipelines=pipelines)


def test_plugin_crash_fail_closed_is_503_and_recorded(engine):
    app = exploding_app(engine, "fail")
    response = post(app.test_client(), "nova", nova_body())
    error = assert_error(response, 503)
    assert "test_exploding_filter" in error["detail"]
    app.extensions["cortex"].decisions.flush(DEADLINE)
    decision = app.test_client().get(f"/v1/decisions/{response.headers['x-cortex-decision-id']}")
    assert decision.get_json()["outcome"] == "error"
    app.extensions["cortex"].decisions.close()


def test_plugin_crash_fail_open_keeps_hosts(engine):
    app = exploding_app(engine, "skip")
    response = post(app.test_client(), "nova", nova_body())
    assert response.status_code == 200 and len(response.get_json()["hosts"]) == 8
    app.extensions["cortex"].decisions.close()


def test_log_lines_carry_caller_request_ids(client, caplog):
    from cortex.log import RequestContextFilter

    body = load_body(FIXTURES / "cinder" / "create-volume-from-image.json")
    caplog.handler.addFilter(RequestContextFilter())
    with caplog.at_level(logging.INFO, logger="cortex"):
        post(client, "cinder", body)
    line = next(r for r in caplog.records if "cinder external" in r.getMessage())
    assert line.caller_request_id == body["context"]["request_id"]
    assert line.global_request_id == body["context"]["global_request_id"]
    assert line.request_id.startswith("req-")


def test_decisions_api(client, app):
    body = load_body(FIXTURES / "nova" / "gpu-2xh100-pinned.json")
    response = post(client, "nova", body)
    app.extensions["cortex"].decisions.flush(DEADLINE)
    uuid = body["spec"]["nova_object.data"]["instance_uuid"]
    listed = client.get(f"/v1/decisions?resource_id={uuid}").get_json()["decisions"]
    assert listed and listed[0]["id"] == response.headers["x-cortex-decision-id"]
    decision = client.get(f"/v1/decisions/{listed[0]['id']}").get_json()
    assert decision["result"] == response.get_json()["hosts"]
    assert decision["request_id"] == body["context"]["request_id"]
    assert decision["weights"] == body["weights"]
    capacity = next(s for s in decision["steps"] if s["name"] == "filter_has_enough_capacity")
    assert capacity["removed"]["cmp0002"] == "no PCPU inventory"
    assert_error(client.get("/v1/decisions/nope"), 404)
    assert_error(client.get("/v1/decisions?limit=many"), 400)


def test_healthcheck(client):
    response = client.get("/healthcheck")
    assert response.status_code == 200 and response.get_data(as_text=True) == "OK"
    head = client.head("/healthcheck")
    assert head.status_code == 204


def test_healthcheck_503_when_database_unreachable():
    app = create_app(make_conf(), engine=dead_engine())
    response = app.test_client().get("/healthcheck")
    assert response.status_code == 503
    assert "database unreachable" in response.get_data(as_text=True)
    app.extensions["cortex"].decisions.close()


def test_version_document_and_openapi(client):
    versions = client.get("/").get_json()["versions"]
    assert versions[0]["id"] == "v1" and versions[0]["status"] == "CURRENT"
    assert client.get("/openapi.json").get_json() == load_openapi()


def test_unknown_path_is_404_json(client):
    assert_error(client.get("/nope"), 404)


def test_metrics_count_requests(client):
    post(client, "nova", nova_body())
    text = client.get("/metrics").get_data(as_text=True)
    assert 'cortex_scheduler_requests_total{intent="create",outcome="ok",' in text
    assert "cortex_scheduler_request_duration_seconds_bucket" in text


def test_engine_errors_are_sqlalchemy_errors():
    # the knowledge cache relies on connection failures surfacing as SQLAlchemyError
    with pytest.raises(OperationalError):
        dead_engine().connect()


@pytest.mark.parametrize("fixture, step, host, reason", [
    # 1 GiB pages: cmp0000 has none configured, cmp0001 has them on the node with free H100s
    ("gpu-2xh100-pinned", "filter_numa_topology", "cmp0000", "no 1048576 KiB pages"),
    ("gpu-1xa100-numa", "filter_gpu_capacity", "cmp0003", "a100: 0 free matching devices"),
    ("gpu-4xl40s-required", "filter_gpu_capacity", "cmp0002", "l40s: 0 free matching"),
])
def test_gpu_bodies_are_filtered_on_topology_with_reasons(client, app, fixture, step, host,
                                                          reason):
    response = post(client, "nova", load_body(FIXTURES / "nova" / f"{fixture}.json"))
    app.extensions["cortex"].decisions.flush(DEADLINE)
    decision = client.get(f"/v1/decisions/{response.headers['x-cortex-decision-id']}")
    [record] = [s for s in decision.get_json()["steps"] if s["name"] == step]
    assert reason in record["removed"][host]


def test_gpu_topology_filters_run_in_the_gpu_pipeline(client, app):
    response = post(client, "nova", load_body(FIXTURES / "nova" / "gpu-8xh100-full-node.json"))
    app.extensions["cortex"].decisions.flush(DEADLINE)
    steps = client.get(f"/v1/decisions/{response.headers['x-cortex-decision-id']}").get_json()[
        "steps"]
    ran = {s["name"] for s in steps if s["status"] == "ran"}
    assert {"filter_gpu_capacity", "filter_gpu_health", "filter_numa_topology",
            "filter_pci_numa_affinity"} <= ran

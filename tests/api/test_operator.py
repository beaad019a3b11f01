"""Operator endpoints: explanations, simulations, per-resource history, metrics names."""

import copy
import dataclasses
import json
import math
import re
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cortex.api.schema import load_openapi
from cortex.cmd import manage
from tests.api.test_contract import assert_error, post
from tests.conftest import FIXTURES, REPO, bodies, load_body
from tests.fake_topology import hgx, with_topology
from tests.waiting import DEADLINE

ALL_BODIES = [(s, p) for s in ("nova", "cinder", "manila") for p in bodies(s)]
GPU_BODY = FIXTURES / "nova" / "gpu-2xh100-pinned.json"


def simulate(client, service, body, query=""):
    return client.post(f"/v1/scheduler/{service}/simulate{query}", data=json.dumps(body),
                       content_type="application/json")


def decided(client, app, service, body):
    """Post ``body`` to the external endpoint; the recorded decision's id."""
    response = post(client, service, body)
    assert response.status_code == 200, response.get_data(as_text=True)
    app.extensions["cortex"].decisions.flush(DEADLINE)
    return response.headers["x-cortex-decision-id"]


def test_explanation_of_a_gpu_decision(client, app):
    body = load_body(GPU_BODY)
    decision_id = decided(client, app, "nova", body)
    response = client.get(f"/v1/decisions/{decision_id}/explanation")
    assert response.status_code == 200
    explained = response.get_json()
    decision = client.get(f"/v1/decisions/{decision_id}").get_json()
    assert explained["decision"]["id"] == decision_id
    assert explained["result"] == decision["result"]
    assert {"host": "cmp0002", "step": "filter_has_enough_capacity",
            "reason": "no PCPU inventory"} in explained["removed"]
    assert [r["host"] for r in explained["ranking"]] == decision["result"]
    assert explained["winner"] == decision["result"][0]
    for row in explained["ranking"]:
        assert row["final"] == decision["final_weights"][row["host"]]
    assert_error(client.get("/v1/decisions/nope/explanation"), 404)


@pytest.mark.parametrize("service, path", ALL_BODIES, ids=lambda v: getattr(v, "stem", v))
def test_counterfactuals_match_the_engine_without_the_weigher(client, service, path):
    """'Without weigher X, host B would have been first' = the pipeline with X at 0."""
    body = load_body(path)
    answer = simulate(client, service, body).get_json()
    explained = answer["explanation"]
    removed = {r["host"] for r in explained["removed"]}
    ranked = [r["host"] for r in explained["ranking"]]
    assert removed | set(ranked) | set(answer["unknown_hosts"]) == {h["host"] for h in
                                                                     body["hosts"]}
    for counterfactual in explained["counterfactuals"]:
        query = f"?pipeline={answer['pipeline']}&multiplier.{counterfactual['without']}=0"
        again = simulate(client, service, body, query).get_json()
        assert again["hosts"][0] == counterfactual["first"], counterfactual


@pytest.mark.parametrize("service, path", ALL_BODIES, ids=lambda v: getattr(v, "stem", v))
def test_cortex_manage_explain_every_bundled_body(client, app, service, path, database_url,
                                                  monkeypatch, capsys):
    body = load_body(path)
    decision_id = decided(client, app, service, body)
    decision = client.get(f"/v1/decisions/{decision_id}").get_json()
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", database_url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    assert manage.main(["explain", decision_id]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"Decision {decision_id} ({service}, ")
    assert f"{decision['result'][0]} first of {len(decision['result'])} answered" in text
    for step in decision["steps"]:
        for host, reason in list((step.get("removed") or {}).items())[:50]:
            assert f"{step['name']}: {reason}" in text and host in text
    if len([h for h in decision["result"] if h in decision["final_weights"]]) > 1:
        assert "Why " in text and "margin" in text
    assert manage.main(["explain", decision_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"]["id"] == decision_id


def test_explain_finds_the_newest_decision_of_an_instance_or_request(
        client, app, database_url, monkeypatch, capsys):
    body = copy.deepcopy(load_body(GPU_BODY))
    body["context"]["request_id"] = "req-explain-by-request"
    first = decided(client, app, "nova", body)
    newest = decided(client, app, "nova", body)
    assert first != newest
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", database_url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    uuid = body["spec"]["nova_object.data"]["instance_uuid"]
    assert manage.main(["explain", uuid]) == 0
    out = capsys.readouterr().out
    assert f"Decision {newest} " in out and "the newest of" in out
    assert manage.main(["explain", "req-explain-by-request"]) == 0
    assert f"Decision {newest} " in capsys.readouterr().out
    assert manage.main(["explain", "no-such-thing"]) == 1
    assert "no decision, resource or request" in capsys.readouterr().err


def test_history_of_a_resource_newest_first(client, app):
    body = copy.deepcopy(load_body(FIXTURES / "cinder" / "extend-volume.json"))
    ids = [decided(client, app, "cinder", body) for _ in range(3)]
    resource = client.get(f"/v1/decisions/{ids[0]}").get_json()["resource_id"]
    assert resource
    listed = client.get(f"/v1/decisions?resource_id={resource}&limit=2").get_json()
    assert [d["id"] for d in listed["decisions"]] == ids[::-1][:2]


def test_simulate_returns_every_step_and_records_nothing(client, app):
    body = load_body(GPU_BODY)
    before = client.get(f"/v1/decisions?request_id={body['context']['request_id']}"
                        "&limit=1000").get_json()["decisions"]
    response = simulate(client, "nova", body)
    assert response.status_code == 200, response.get_data(as_text=True)
    answer = response.get_json()
    external = post(client, "nova", body).get_json()
    assert answer["hosts"] == external["hosts"]
    assert answer["pipeline"] == "kvm-gpu-topology-aware" and answer["recorded"] is False
    assert answer["decision_id"] is None and "x-cortex-decision-id" not in response.headers
    assert [s["name"] for s in answer["steps"]][0] == "filter_host_instructions"
    assert answer["explanation"]["winner"] == answer["hosts"][0]
    app.extensions["cortex"].decisions.flush(DEADLINE)
    after = client.get(f"/v1/decisions?request_id={body['context']['request_id']}"
                       "&limit=1000").get_json()["decisions"]
    assert len(after) == len(before) + 1  # the external call only


def test_simulate_with_record_writes_a_simulated_decision(client, app):
    response = simulate(client, "nova", load_body(GPU_BODY), "?record=true")
    answer = response.get_json()
    assert answer["recorded"] is True
    assert response.headers["x-cortex-decision-id"] == answer["decision_id"]
    app.extensions["cortex"].decisions.flush(DEADLINE)
    stored = client.get(f"/v1/decisions/{answer['decision_id']}").get_json()
    assert stored["outcome"] == "simulated" and stored["result"] == answer["hosts"]


def test_simulate_another_pipeline_and_changed_multiplier(client):
    body = load_body(FIXTURES / "nova" / "multi-create-anti-affinity.json")  # 2 survivors
    base = simulate(client, "nova", body).get_json()
    weigher = next(s for s in base["steps"] if s["kind"] == "weigher" and s.get("raw")
                   and len(set(s["raw"].values())) > 1)
    doubled = simulate(client, "nova", body,
                       f"?multiplier.{weigher['name']}=3").get_json()
    step = next(s for s in doubled["steps"] if s["name"] == weigher["name"])
    assert step["multiplier"] == 3.0
    for host, raw in step["raw"].items():
        assert step["scaled"][host] == pytest.approx(3.0 * math.tanh(raw))
    other = simulate(client, "nova", body, "?pipeline=kvm-general-purpose-load-balancing")
    assert other.get_json()["pipeline"] == "kvm-general-purpose-load-balancing"
    general = next(s["name"] for s in other.get_json()["steps"] if s["kind"] == "weigher")
    in_body = copy.deepcopy(body)
    in_body["simulate"] = {"pipeline": "kvm-general-purpose-load-balancing",
                           "multipliers": {general: 3}}
    answer = simulate(client, "nova", in_body).get_json()
    assert answer["pipeline"] == "kvm-general-purpose-load-balancing"
    assert next(s for s in answer["steps"] if s["name"] == general)["multiplier"] == 3.0


def test_simulate_option_override_changes_what_a_filter_removes(client):
    body = load_body(GPU_BODY)
    keep = body["hosts"][0]["host"]
    query = f'?option.filter_excluded_hosts.hosts=["{keep}"]'
    answer = simulate(client, "nova", body, query).get_json()
    excluded = next(s for s in answer["steps"] if s["name"] == "filter_excluded_hosts")
    assert keep in excluded["removed"] and keep not in answer["hosts"]
    assert answer["overrides"]["options"] == {"filter_excluded_hosts": {"hosts": [keep]}}


@pytest.mark.parametrize("query, body_extra, fragment", [
    ("?pipeline=nope", None, "unknown pipeline 'nope'"),
    ("?pipeline=cinder-external-scheduler", None, "is for cinder, not nova"),
    ("?multiplier.nope=2", None, "has no step nope"),
    ("?multiplier.weigher_binpack=much", None, "must be a number"),
    ("?multiplier.weigher_binpack=NaN", None, "must be a number"),
    ("?multiplier.filter_status=2", None, "only be given to a weigher"),
    ("?option.filter_excluded_hosts.hosts=7", None, "is not"),
    ("?option.filter_excluded_hosts.colour=red", None, "unknown option"),
    ("?option.filter_excluded_hosts=1", None, "unknown query parameter"),
    ("?colour=red", None, "unknown query parameter"),
    ("?record=maybe", None, "record must be true or false"),
    ("", {"simulate": {"multipliers": {"weigher_binpack": "x"}}}, "simulate/multipliers"),
    ("", {"simulate": {"colour": 1}}, "simulate"),
])
def test_simulate_refuses_bad_overrides(client, query, body_extra, fragment):
    body = copy.deepcopy(load_body(GPU_BODY)) | (body_extra or {})
    error = assert_error(simulate(client, "nova", body, query), 400)
    assert fragment in error["detail"]


def test_simulate_checks_the_body_like_the_external_endpoint(client):
    assert_error(simulate(client, "nova", {"hosts": 1}), 400)
    response = client.post("/v1/scheduler/nova/simulate", data="x", content_type="text/plain")
    assert_error(response, 415)


def test_openapi_documents_the_operator_endpoints():
    paths = load_openapi()["paths"]
    assert "get" in paths["/v1/decisions/{decision_id}/explanation"]
    assert "post" in paths["/v1/scheduler/{service}/simulate"]


def families(client):
    text = client.get("/metrics").get_data(as_text=True)
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family, **labels):
    return [s for s in family.samples
            if all(s.labels.get(k) == v for k, v in labels.items())]


def test_metrics_count_steps_removals_and_reordering(client):
    body = load_body(GPU_BODY)
    for _ in range(2):
        post(client, "nova", body)
    found = families(client)
    pipeline = "kvm-gpu-topology-aware"
    removed = samples(found["cortex_pipeline_hosts_removed"], pipeline=pipeline,
                      step="filter_has_enough_capacity")
    assert removed and removed[0].value >= 2 * 4  # four hosts without PCPU, twice
    count = samples(found["cortex_pipeline_step_duration_seconds"], pipeline=pipeline,
                    step="filter_has_enough_capacity")
    assert any(s.name.endswith("_count") and s.value >= 2 for s in count)
    reordered = found["cortex_pipeline_reordered"]
    assert sum(s.value for s in samples(reordered, pipeline=pipeline)
               if s.name.endswith("_total")) >= 2
    assert {s.labels["first_choice"] for s in reordered.samples} <= {"kept", "changed"}
    requests = samples(found["cortex_scheduler_requests"], service="nova", pipeline=pipeline,
                       intent="create", outcome="ok")
    assert requests and requests[0].value >= 2


def test_simulations_are_not_counted_as_scheduler_calls(client):
    body = load_body(FIXTURES / "manila" / "create-share-nfs.json")
    before = families(client).get("cortex_scheduler_requests")
    simulate(client, "manila", body)
    after = families(client).get("cortex_scheduler_requests")
    assert (before.samples if before else []) == (after.samples if after else [])


def test_knowledge_age_version_and_kpis_are_exposed(client, app):
    found = families(client)
    age = samples(found["cortex_knowledge_age_seconds"], source="database")
    assert len(age) == 1 and 0 <= age[0].value < 60
    view = app.extensions["cortex"].knowledge.current
    assert found["cortex_knowledge_version"].samples[0].value == view.version
    ratio = samples(found["cortex_host_utilization_ratio"], host="cmp0008",
                    resource_class="CUSTOM_PCI_10DE_2330")
    assert ratio[0].value == 1.0  # 8 of 8 H100 in use
    free = samples(found["cortex_gpus_free"], model="H100 SXM5 80GB", availability_zone="az-1")
    assert free and free[0].value > 0
    assert samples(found["cortex_gpus_stranded"], request_gpus="8")
    zone = samples(found["cortex_availability_zone_utilization_ratio"],
                   availability_zone="az-2", resource_class="VCPU")
    assert zone and 0 <= zone[0].value <= 1
    for name in ("cortex_host_utilization_ratio", "cortex_availability_zone_utilization_ratio"):
        former = found[name.replace("utilization", "utilisation")]  # deprecated, kept a release
        assert former.documentation.startswith(f"Deprecated: use {name}")
        assert [s.value for s in former.samples] == [s.value for s in found[name].samples]


def test_per_host_utilization_series_can_be_left_out(engine):
    from cortex.api.app import create_app
    from tests.api.conftest import make_conf

    app = create_app(make_conf(**{"api.export_host_utilization": False}), engine=engine)
    try:
        found = families(app.test_client())
    finally:
        app.extensions["cortex"].decisions.close()
    assert "cortex_host_utilization_ratio" not in found
    assert "cortex_host_utilisation_ratio" not in found
    zone = samples(found["cortex_availability_zone_utilization_ratio"],
                   availability_zone="az-2", resource_class="VCPU")
    former = samples(found["cortex_availability_zone_utilisation_ratio"],
                     availability_zone="az-2", resource_class="VCPU")
    assert zone and [s.value for s in former] == [s.value for s in zone]
    assert samples(found["cortex_gpus_free"], model="H100 SXM5 80GB")


def test_decision_queue_depth_returns_to_zero_after_writes(client, app):
    post(client, "nova", load_body(GPU_BODY))
    app.extensions["cortex"].decisions.flush(DEADLINE)
    depth = families(client)["cortex_decision_queue_depth"].samples[0].value
    assert depth == 0


def test_multi_gpu_placements_count_nvlink_when_the_host_reports_topology(app, client,
                                                                          monkeypatch):
    cache = app.extensions["cortex"].knowledge
    current = cache.view()
    hosts = dict(current.hosts)
    hosts["cmp0000"] = with_topology(hosts["cmp0000"], hgx())  # all eight GPUs free
    hosts["cmp0001"] = with_topology(hosts["cmp0001"], hgx(nvswitch=False, pairs=set()))
    monkeypatch.setattr(cache, "_view", dataclasses.replace(current,
                                                            hosts=MappingProxyType(hosts)))
    # the fake topologies feed the metric only: the topology filters of the GPU pipeline
    # read the real HostTopology, so a pipeline without them judges these hosts
    body = load_body(GPU_BODY) | {"pipeline": "kvm-general-purpose-load-balancing"}
    first = post(client, "nova", body).get_json()["hosts"][0]
    assert first in ("cmp0000", "cmp0001")
    found = families(client)["cortex_gpu_placements"]
    counted = {s.labels["nvlink"]: s.value for s in found.samples if s.name.endswith("_total")}
    assert counted == {"connected" if first == "cmp0000" else "not_connected": 1.0}
    bare = dict(current.hosts)
    for name in ("cmp0000", "cmp0001"):  # no report: nothing to judge, nothing counted
        bare[name] = dataclasses.replace(bare[name], topology=None)
    monkeypatch.setattr(cache, "_view", dataclasses.replace(current,
                                                            hosts=MappingProxyType(bare)))
    post(client, "nova", body)
    assert sum(s.value for s in families(client)["cortex_gpu_placements"].samples
               if s.name.endswith("_total")) == 1.0


def test_documented_simulate_commands_work(client, app):
    page = (REPO / "docs" / "scheduler" / "explain.md").read_text()
    urls = re.findall(r"http://127\.0\.0\.1:8080(/v1/scheduler/nova/simulate[^' \n]*)", page)
    assert len(urls) == 2
    body = load_body(GPU_BODY)
    for url in urls:
        response = client.post(url, data=json.dumps(body), content_type="application/json")
        assert response.status_code == 200, (url, response.get_data(as_text=True))
    recorded = response.get_json()
    assert recorded["recorded"] and recorded["pipeline"] == "kvm-general-purpose-load-balancing"
    assert "cmp0000" not in recorded["hosts"]

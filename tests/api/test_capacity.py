"""GET /v1/capacity and the flavor capacity gauges on the demo fleet.

Every GPU shape the demo's Nova bodies ask for (tests/fixtures/nova) and a CPU shape are
counted by the API and, one instance per pipeline call, by the brute force of
tests/unit/test_capacity.py: equal per host, with a commitment of another project and
the failover room (an app whose GPU pipeline keeps one host per zone and model) on and
off.
"""

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cortex.api.app import create_app
from cortex.conf import shipped_file
from cortex.pipeline.config import load_pipelines
from cortex.services.capacity import FlavorCapacity, Shape, gpu_flavors, placeable
from cortex.simulator.capacity import empty_view
from tests.api.conftest import demo_app, make_conf, stop_app
from tests.conftest import demo_sqlite
from tests.unit.test_capacity import brute_force

H100, A100, L40S = "2330", "20b5", "26b9"
SHAPES = {  # the demo bodies' flavors: 8xH100 full node, 2xH100 pinned, 1xA100, 4xL40S
    "8xh100": {"vcpus": 64, "memory_mb": 262144, "gpus": 8, "products": H100},
    "2xh100": {"vcpus": 16, "memory_mb": 65536, "gpus": 2, "products": H100},
    "1xa100": {"vcpus": 8, "memory_mb": 32768, "gpus": 1, "products": A100},
    "4xl40s": {"vcpus": 32, "memory_mb": 131072, "gpus": 4, "products": L40S},
    "cpu": {"vcpus": 32, "memory_mb": 65536},
}


@pytest.fixture(scope="module")
def demo():
    with demo_app("capacity") as (url, engine, app):
        yield app


@pytest.fixture(scope="module")
def failover_app(demo, tmp_path_factory):
    path = tmp_path_factory.mktemp("pipelines") / "pipelines.yaml"
    path.write_text(shipped_file("pipelines.yaml").read_text().replace(
        "options: {hosts: 0, group_by: gpu_model}", "options: {hosts: 1, group_by: gpu_model}"))
    services = demo.extensions["cortex"]
    app = create_app(make_conf(**{"database.connection": services.conf.database_url,
                                  "database.knowledge_check_interval": 0.0}),
                     engine=services.engine, pipelines=load_pipelines(path))
    yield app
    stop_app(app)


def shape_of(values):
    products = tuple(p for p in values.get("products", "").split(",") if p)
    return Shape(values["vcpus"], values["memory_mb"], values.get("gpus", 0), products)


def ask(app, **query):
    answer = app.test_client().get("/v1/capacity", query_string=query)
    return answer.status_code, answer.get_json()


@pytest.mark.parametrize("name", SHAPES)
@pytest.mark.parametrize("failover", [False, True], ids=["no-failover", "failover"])
def test_the_answer_is_the_one_by_one_count(demo, failover_app, name, failover):
    app = failover_app if failover else demo
    status, found = ask(app, availability_zone="az-1", limit=100000, **SHAPES[name])
    assert status == 200, found
    view = app.extensions["cortex"].knowledge.view()
    pipelines = app.extensions["cortex"].pipelines
    shape = shape_of(SHAPES[name])
    now = {h["host"]: h["now"] for h in found["hosts"] if h["now"]}
    empty = {h["host"]: h["empty"] for h in found["hosts"] if h["empty"]}
    assert now == brute_force(view, shape, "az-1", pipelines=pipelines)
    assert empty == brute_force(empty_view(view), shape, "az-1", pipelines=pipelines)
    assert found["placeable_now"] == sum(now.values()) <= found["placeable_empty"]
    assert found["complete"] and found["limited_by"]


@pytest.mark.parametrize("name", ["2xh100", "cpu"])
def test_another_projects_commitment_is_counted_as_used(demo, name):
    services = demo.extensions["cortex"]
    values = SHAPES[name]
    before = ask(demo, availability_zone="az-1", project_id="someone", limit=100000,
                 **values)[1]
    now = datetime.now(UTC)
    created = demo.test_client().post("/v1/commitments", json={
        "project_id": "owner", "availability_zone": "az-1", "vcpus": values["vcpus"],
        "memory_mb": values["memory_mb"], "gpus": values.get("gpus", 0),
        "products": [values["products"]] if "products" in values else [], "count": 1,
        "end_at": (now + timedelta(days=1)).isoformat()})
    assert created.status_code == 201, created.get_json()
    try:
        services.knowledge.view()
        services.knowledge.wait_for_refresh(10)  # the version the write moved
        view = services.knowledge.view()
        assert view.commitments
        other = ask(demo, availability_zone="az-1", project_id="someone", limit=100000,
                    **values)[1]
        owner = ask(demo, availability_zone="az-1", project_id="owner", limit=100000,
                    **values)[1]
        assert other["placeable_now"] == before["placeable_now"] - 1
        assert owner["placeable_now"] == before["placeable_now"]
        shape = replace(shape_of(values), project_id="someone")
        assert {h["host"]: h["now"] for h in other["hosts"] if h["now"]} == brute_force(
            view, shape, "az-1", pipelines=services.pipelines, now=datetime.now(UTC))
    finally:
        demo.test_client().delete(f"/v1/commitments/{created.get_json()['id']}")
        services.knowledge.view()
        services.knowledge.wait_for_refresh(10)


def test_a_synced_flavor_is_asked_by_name(demo):
    status, found = ask(demo, flavor="v1.a100-3g")
    assert status == 200, found
    assert found["pipeline"] and found["placeable_empty"] >= found["placeable_now"]
    assert ask(demo, flavor="no-such-flavor")[0] == 404
    # its alias h100 is not in [gpu] pci_alias: asked as two GPUs of any model, never none
    h100 = ask(demo, flavor="g1.2xh100", availability_zone="az-1")[1]
    shape = ask(demo, availability_zone="az-1", **SHAPES["2xh100"])[1]
    assert 0 < h100["placeable_empty"] <= shape["placeable_empty"]


@pytest.mark.parametrize("query,word", [
    ({}, "required"), ({"vcpus": 4}, "required"), ({"vcpus": "x", "memory_mb": 1}, "vcpus"),
    ({"vcpus": 0, "memory_mb": 1}, "vcpus"), ({"vcpus": 5000, "memory_mb": 1}, "vcpus"),
    ({"vcpus": 1, "memory_mb": -1}, "memory_mb"), ({"vcpus": 1, "memory_mb": 1, "gpus": 65},
                                                   "gpus"),
    ({"vcpus": 1, "memory_mb": 1, "products": "h100"}, "products"),
    ({"vcpus": 1, "memory_mb": 1, "products": ",".join(["2330"] * 17)}, "products"),
    ({"vcpus": 3, "memory_mb": 1024, "numa_nodes": 2}, "numa_nodes"),
    ({"vcpus": 1, "memory_mb": 1, "numa_nodes": 17}, "numa_nodes"),
    ({"vcpus": 1, "memory_mb": 1, "mem_page_size": "huge"}, "mem_page_size"),
    ({"vcpus": 1, "memory_mb": 1, "project_id": "a b"}, "project_id"),
    ({"vcpus": 1, "memory_mb": 1, "limit": 0}, "limit"),
    ({"vcpus": 1, "memory_mb": 1, "limit": 100001}, "limit"),
    ({"vcpus": 1, "memory_mb": 1, "availability_zone": "az-9"}, "az-9"),
    ({"vcpus": 1, "memory_mb": 1, "flavor": "g1.2xh100"}, "flavor")])
def test_bad_queries_are_400_with_a_short_reason(demo, query, word):
    status, found = ask(demo, **query)
    assert status == 400
    (error,) = found["errors"]
    assert word in error["detail"] and "Traceback" not in error["detail"]


def test_the_gauges_are_computed_per_knowledge_version_off_the_scrape(demo):
    services = demo.extensions["cortex"]
    flavors = gpu_flavors(services.engine)
    assert [s.flavor for s in flavors] == ["g1.2xh100", "v1.a100-3g"]  # the servers' flavors
    gauges = FlavorCapacity(services.scheduler, lambda: flavors, services.devices)
    assert list(gauges.collect())[0].samples == []  # a scrape never computes
    assert gauges.refresh() and not gauges.refresh()  # once per version
    (family,) = gauges.collect()
    got = {(s.labels["flavor"], s.labels["availability_zone"], s.labels["state"]): s.value
           for s in family.samples}
    view = services.knowledge.view()
    expected = placeable(services.scheduler, flavors[1], "az-1", view=view)
    assert got[("v1.a100-3g", "az-1", "now")] == expected["placeable_now"]
    assert got[("v1.a100-3g", "az-1", "empty")] == expected["placeable_empty"]
    text = demo.test_client().get("/metrics").get_data(as_text=True)
    assert "cortex_flavor_placeable_instances" in {
        f.name for f in text_string_to_metric_families(text)}


def test_cortex_manage_capacity_prints_the_same_answer(demo, tmp_path, monkeypatch, capsys):
    from cortex.cmd import manage

    url, _ = demo_sqlite(tmp_path / "cortex.sqlite")
    monkeypatch.setenv("CORTEX_DATABASE_CONNECTION", url)
    monkeypatch.delenv("CORTEX_CONFIG_FILE", raising=False)
    values = SHAPES["2xh100"]
    shape = ["capacity", "--vcpus", str(values["vcpus"]), "--memory-mb",
             str(values["memory_mb"]), "--gpus", "2", "--product", H100,
             "--availability-zone", "az-1"]
    assert manage.main([*shape, "-f", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == ask(demo, availability_zone="az-1", **values)[1]
    assert manage.main(shape) == 0
    table = capsys.readouterr().out
    assert f"placeable now: {printed['placeable_now']}" in table and "host" in table
    assert manage.main(["capacity", "--flavor", "v1.a100-3g", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["pipeline"]
    assert manage.main(["capacity", "--vcpus", "0", "--memory-mb", "1"]) == 2
    assert manage.main(["capacity", "--flavor", "nothing"]) == 1
    assert "no synced flavor" in capsys.readouterr().err

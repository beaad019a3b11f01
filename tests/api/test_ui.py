"""The dashboard's pages as HTML, through the test client (the browser test drives Chromium)."""

import dataclasses
import html
import re
from types import MappingProxyType

import pytest

from cortex.api.app import create_app
from tests.api.conftest import make_conf
from tests.api.test_contract import assert_error, post
from tests.conftest import FIXTURES, load_body
from tests.fake_topology import hgx, topology_host


def page(client, path):
    response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    assert response.mimetype == "text/html"
    return html.unescape(response.get_data(as_text=True))


def test_fleet_page_shows_zones_hosts_and_gpus(client):
    text = page(client, "/ui")
    assert "<h1>Fleet</h1>" in text
    assert 'id="zone-az-1"' in text and 'id="zone-az-2"' in text
    assert '<a href="/ui/hosts/cmp0000">cmp0000</a>' in text
    assert "H100 SXM5 80GB" in text and "L40S" in text and "vGPU A100_3G_40GB" in text
    # cmp0008 has all 8 H100 in use, cmp0005 is down, cmp0006 disabled
    row = re.search(r'cmp0008</a>.*?</tr>', text, re.S).group(0)
    assert "0/8 H100 SXM5 80GB" in row
    assert 'status down">down' in re.search(r'cmp0005</a>.*?</tr>', text, re.S).group(0)
    assert 'status disabled">disabled' in re.search(r'cmp0006</a>.*?</tr>', text, re.S).group(0)
    assert "cinder-volume-1@netapp-a#aggr1" in text


def test_host_page_shows_allocations_and_says_when_no_topology(client):
    text = page(client, "/ui/hosts/cmp0008")
    assert "CUSTOM_PCI_10DE_2330" in text and 'id="allocations"' in text
    # a general-purpose host: no agent reports its topology, with or without GPU work
    plain = page(client, "/ui/hosts/cmp0017")
    assert "No topology reported" in plain and "<svg" not in plain
    assert_error(client.get("/ui/hosts/nope"), 404)


def test_host_page_draws_a_reported_topology(app, client, monkeypatch):
    cache = app.extensions["cortex"].knowledge
    view = cache.view()
    fake = topology_host("cmp-hgx", topology=hgx(in_use=(0, 1)))
    monkeypatch.setattr(cache, "_view", dataclasses.replace(
        view, hosts=MappingProxyType(dict(view.hosts) | {"cmp-hgx": fake})))
    text = page(client, "/ui/hosts/cmp-hgx")
    svg = re.search(r"<svg.*?</svg>", text, re.S).group(0)
    assert svg.count('class="gpu used"') == 2 and svg.count('class="gpu free"') == 6
    assert "NUMA 0, socket 0" in svg and "NVLink all-to-all (18 links per pair)" in svg
    assert 'id="topology-matrix"' in text and ">NV18<" in text
    assert "No topology reported" not in text


def test_decisions_page_filters_and_links_to_the_explanation(client, app):
    body = load_body(FIXTURES / "nova" / "gpu-2xh100-pinned.json")
    decision_id = post(client, "nova", body).headers["x-cortex-decision-id"]
    post(client, "cinder", load_body(FIXTURES / "cinder" / "extend-volume.json"))
    app.extensions["cortex"].decisions.flush()
    text = page(client, "/ui/decisions?service=nova&limit=500")
    assert f'/ui/decisions/{decision_id}"' in text
    assert "cinder-external-scheduler</td>" not in text
    cinder = page(client, "/ui/decisions?service=cinder")
    assert "cinder-external-scheduler</td>" in cinder and "kvm-gpu-bin-packing</td>" not in cinder
    uuid = body["spec"]["nova_object.data"]["instance_uuid"]
    assert f'/ui/decisions/{decision_id}"' in page(client, f"/ui/decisions?resource_id={uuid}")
    assert_error(client.get("/ui/decisions?limit=lots"), 400)


def test_decision_page_explains_and_tabulates_steps(client, app):
    # two hosts survive (a counterfactual needs a runner-up); cmp0007 is too full
    body = load_body(FIXTURES / "nova" / "multi-create-anti-affinity.json")
    response = post(client, "nova", body)
    app.extensions["cortex"].decisions.flush()
    decision_id = response.headers["x-cortex-decision-id"]
    explanation = client.get(f"/v1/decisions/{decision_id}/explanation").get_json()
    text = page(client, f"/ui/decisions/{decision_id}")
    assert explanation["summary"] in text
    removed = {r["host"]: r["reason"] for r in explanation["removed"]}
    assert f"✗ {removed['cmp0007']}" in text  # in its filter's column
    assert 'id="step-matrix"' in text and 'id="counterfactuals"' in text
    for host in response.get_json()["hosts"]:
        assert f"<th>{host}" in text
    assert_error(client.get("/ui/decisions/nope"), 404)


def test_pipelines_page_lists_steps_options_and_multipliers(client, app):
    text = page(client, "/ui/pipelines")
    for name in app.extensions["cortex"].pipelines.pipelines:
        assert f'id="pipeline-{name}"' in text
    section = re.search(r'id="pipeline-kvm-general-purpose-load-balancing".*?</section>', text,
                        re.S).group(0)
    row = re.search(r"<td>weigher_binpack</td>.*?</tr>", section, re.S).group(0)
    assert '<td class="num">-1</td>' in row and '"VCPU": 1.0' in row
    assert "gpu" in text and "kvm-gpu-bin-packing" in text  # the choice rules


def test_static_files_are_served(client):
    css = client.get("/ui/static/cortex.css")
    assert css.status_code == 200 and "svg.topology" in css.get_data(as_text=True)
    assert client.get("/ui/static/cortex.js").status_code == 200
    assert client.get("/ui/static/nope.css").status_code == 404


@pytest.mark.parametrize("path", ["/ui", "/ui/decisions", "/ui/pipelines", "/ui/hosts/cmp0000",
                                  "/ui/descheduler", "/ui/timeline", "/ui/timeline/panel",
                                  "/ui/gpus", "/ui/gpus/panel", "/ui/forecasts",
                                  "/ui/forecasts/panel"])
def test_dashboard_needs_the_reader_role(engine, database_url, path):
    conf = make_conf(**{"api.auth_strategy": "static", "database.connection": database_url,
                        "api.static_tokens": "ops:reader:r-token,hv:agent:a-token"})
    app = create_app(conf, engine=engine)
    client = app.test_client()
    assert_error(client.get(path), 401)
    assert_error(client.get(path, headers={"X-Auth-Token": "a-token"}), 403)
    assert client.get(path, headers={"X-Auth-Token": "r-token"}).status_code == 200
    assert client.get("/ui/static/cortex.css").status_code == 200
    app.extensions["cortex"].decisions.close()

"""What a newcomer meets in the first hour: error pages, units, /metrics, startup warnings."""

import dataclasses
import html
import logging
import re
from types import MappingProxyType

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from cortex import conf
from cortex.api.app import create_app
from cortex.dashboard.units import quantity
from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.cache import KnowledgeCache
from tests.api.conftest import make_conf
from tests.api.test_contract import assert_error
from tests.fake_topology import hgx, topology_host

#: What Chromium sends when it navigates to a page.
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"


def accept(value):
    return {"Accept": value} if value is not None else {}


def assert_html_error(response, status):
    assert response.status_code == status, response.get_data(as_text=True)[:300]
    assert response.mimetype == "text/html"
    assert "Accept" in response.vary
    text = html.unescape(response.get_data(as_text=True))
    assert f"<h1>{status} " in text and 'href="/ui/static/cortex.css"' in text
    assert response.headers["x-openstack-request-id"] in text
    return text


def test_ui_with_a_slash_redirects_to_ui(client):
    response = client.get("/ui/", headers=accept(BROWSER))
    assert response.status_code == 308 and response.headers["Location"] == "/ui"
    assert client.get("/ui/?q=1").headers["Location"] == "/ui?q=1"
    assert client.get("/ui/", follow_redirects=True).status_code == 200


@pytest.mark.parametrize("path, detail", [
    ("/ui/hosts/nope", "no host nope in the knowledge view"),
    ("/ui/decisions/nope", "no decision nope"),
    ("/ui/nope", "not found"),
    ("/nope", "not found"),
    ("/v1/decisions/nope", "no decision nope"),
])
def test_a_browser_gets_an_html_404(module_client, path, detail):
    text = assert_html_error(module_client.get(path, headers=accept(BROWSER)), 404)
    assert detail in text.lower()


@pytest.mark.parametrize("value", [None, "application/json", "*/*", "application/json, */*",
                                   "text/html;q=0.5, application/json"])
@pytest.mark.parametrize("path", ["/ui/hosts/nope", "/nope", "/v1/decisions/nope"])
def test_an_api_client_keeps_the_json_404(module_client, path, value):
    response = module_client.get(path, headers=accept(value))
    error = assert_error(response, 404)
    assert error["title"] == "Not Found" and "Accept" in response.vary


def test_405_is_html_for_a_browser_and_json_for_a_client_with_allow(client):
    page = client.post("/ui", headers=accept(BROWSER))
    assert_html_error(page, 405)
    assert set(page.headers["Allow"].split(", ")) == {"GET", "HEAD"}
    error = assert_error(client.post("/ui"), 405)
    assert error["title"] == "Method Not Allowed"


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/scheduler/nova/external", 405),
    ("POST", "/scheduler/nope/external", 404),
    ("POST", "/scheduler/cinder/external/more", 404),
])
def test_the_external_endpoints_answer_json_whatever_the_accept(client, method, path, status):
    response = client.open(path, method=method, headers=accept(BROWSER), json={})
    assert_error(response, status)
    assert "Accept" not in response.vary


def test_metrics_content_type_has_one_charset(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert response.headers["Content-Type"].count("charset") == 1


@pytest.mark.parametrize("value, resource_class, shown", [
    (2031616, "MEMORY_MB", "1.94 TiB"),
    (524288, "MEMORY_MB", "512 GiB"),
    (15872, "MEMORY_MB", "15.5 GiB"),
    (1024, "MEMORY_MB", "1 GiB"),
    (512, "MEMORY_MB", "512 MiB"),
    (0, "MEMORY_MB", "0 MiB"),
    (-2048, "MEMORY_MB", "-2 GiB"),
    (3576, "DISK_GB", "3.49 TiB"),
    (1000, "DISK_GB", "1000 GiB"),
    (2 ** 20, "DISK_GB", "1 PiB"),
    (2 ** 21, "DISK_GB", "2 PiB"),
    (64, "PCPU", "64 CPUs"),
    (1, "PCPU", "1 CPU"),
    (256.0, "VCPU", "256 vCPUs"),
    (1.5, "VCPU", "1.5 vCPUs"),
    (8, "CUSTOM_PCI_10DE_2330", "8"),
    (2031616.0, "CUSTOM_THING", "2031616"),
    (2.5, "", "2.5"),
])
def test_quantity_shows_placement_units_for_people(value, resource_class, shown):
    assert quantity(value, resource_class) == shown


def test_host_page_shows_memory_disk_and_cpus_in_human_units(client):
    response = client.get("/ui/hosts/cmp0008")
    assert response.status_code == 200
    text = html.unescape(response.get_data(as_text=True))
    memory = re.search(r"<td>MEMORY_MB</td>.*?</tr>", text, re.S).group(0)
    cells = re.findall(r'<td class="num">([^<]*)</td>', memory)
    assert cells == ["2 TiB", "64 GiB", "1", "1.94 TiB", "1.86 TiB", "84 GiB"]
    assert 'title="1.86 TiB of 1.94 TiB"' in memory
    assert "3.49 TiB" in re.search(r"<td>DISK_GB</td>.*?</tr>", text, re.S).group(0)
    assert "200 CPUs" in re.search(r"<td>PCPU</td>.*?</tr>", text, re.S).group(0)
    assert not re.search(r"\de[+-]\d", text)  # no 2.03162e+06 anywhere
    fleet = html.unescape(client.get("/ui").get_data(as_text=True))
    assert not re.search(r"\de[+-]\d", fleet) and re.search(r'title="[\d.]+ TiB of ', fleet)


def test_numa_cells_show_memory_in_human_units(app, client, monkeypatch):
    cache = app.extensions["cortex"].knowledge
    view = cache.view()
    fake = topology_host("cmp-hgx", topology=hgx())
    monkeypatch.setattr(cache, "_view", dataclasses.replace(
        view, hosts=MappingProxyType(dict(view.hosts) | {"cmp-hgx": fake})))
    text = html.unescape(client.get("/ui/hosts/cmp-hgx").get_data(as_text=True))
    assert "1 TiB, 256 GiB used" in text


NO_HOSTS = "the knowledge holds no hosts"
NO_TOKENS = "static_tokens is empty"
NO_KEYSTONE = "[keystone_authtoken] section is empty"


def start(caplog, conf_, engine):
    """Create (and close) an app; the startup warnings of cortex.api.app it logged."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cortex.api.app"):
        app = create_app(conf_, engine=engine)
    app.extensions["cortex"].decisions.close()
    return [r.getMessage() for r in caplog.records
            if r.name == "cortex.api.app" and r.levelno == logging.WARNING]


def test_no_warning_for_a_loaded_fleet_with_tokens(caplog, engine):
    messages = start(caplog, make_conf(**{"api.auth_strategy": "static",
                                          "api.static_tokens": "ops:reader:r"}), engine)
    assert messages == []


def test_warns_once_when_the_knowledge_holds_no_hosts(caplog, empty_database_url):
    engine = make_engine(empty_database_url)
    try:
        # not migrated yet: the view cannot be read; the app starts all the same
        unread = start(caplog, make_conf(), engine)
        assert not any(NO_HOSTS in m for m in unread)
        migrate.upgrade(engine)
        messages = start(caplog, make_conf(), engine)
    finally:
        engine.dispose()
    hits = [m for m in messages if NO_HOSTS in m]
    assert len(hits) == 1
    assert "cortex-manage sync --once" in hits[0] and "cortex-manage load-fleet" in hits[0]


@pytest.mark.parametrize("tokens, warned", [("", True), ("  ", True), ("ops:reader:r", False)])
def test_warns_when_static_auth_has_no_token(caplog, engine, tokens, warned):
    messages = start(caplog, make_conf(**{"api.auth_strategy": "static",
                                          "api.static_tokens": tokens}), engine)
    assert [m for m in messages if NO_TOKENS in m] == ([messages[0]] if warned else [])


def test_noauth_does_not_warn_about_tokens(caplog, engine):
    assert not any(NO_TOKENS in m for m in start(caplog, make_conf(), engine))


@pytest.mark.parametrize("section, warned", [
    ("", True),
    ("[keystone_authtoken]\n", True),
    ("[keystone_authtoken]\nwww_authenticate_uri = http://127.0.0.1:5000/v3\n", False),
])
def test_warns_when_keystone_auth_has_no_section(caplog, engine, tmp_path, section, warned):
    path = tmp_path / "cortex.conf"
    path.write_text("[api]\nauth_strategy = keystone\n" + section)
    messages = start(caplog, conf.load(str(path), environ={}), engine)
    assert any(NO_KEYSTONE in m for m in messages) == warned
    assert not any(NO_TOKENS in m for m in messages)


def test_a_failing_startup_check_never_stops_the_app(caplog, engine, monkeypatch):
    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(KnowledgeCache, "current", property(broken))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cortex.api.app"):
        app = create_app(make_conf(), engine=engine)
    app.extensions["cortex"].decisions.close()
    assert any("startup checks failed" in r.getMessage() for r in caplog.records)

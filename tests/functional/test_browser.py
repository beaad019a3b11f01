"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright.

gunicorn serves the demo fleet on the session's PostgreSQL database; every page is
opened, its content checked, and a screenshot saved under tests/artifacts/browser/.
Playwright uses the system browser (/usr/bin/chromium, installed by tests/run.sh); its
own browser downloads are never used. A missing browser is a failure, never a skip.
"""

import dataclasses
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from types import MappingProxyType

import pytest
from werkzeug.serving import make_server

from cortex.api.app import create_app
from tests.api.conftest import make_conf
from tests.conftest import FIXTURES, REPO, load_body
from tests.fake_topology import hgx, topology_host
from tests.functional.test_gunicorn import free_port, request, start_gunicorn

pytestmark = pytest.mark.functional

ARTIFACTS = REPO / "tests" / "artifacts" / "browser"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def chromium_path():
    """The system Chromium, or why there is none."""
    for candidate in (os.environ.get("CORTEX_TEST_CHROMIUM"), "/usr/bin/chromium",
                      shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def unavailable(reason):
    pytest.fail(f"no browser: {reason}; 'bash tests/run.sh' installs it")


@pytest.fixture(scope="module")
def browser():
    """A persistent Chromium context with a fresh profile; records page errors."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install '.[test]')")
    executable = chromium_path()
    if executable is None:
        unavailable("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="cortex-chromium-")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000})
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser):
    """A new tab; fails the test on any JavaScript error or failed request."""
    tab = browser.new_page()
    problems = []
    tab.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
           if m.type == "error" else None)
    tab.on("response", lambda r: problems.append(f"{r.status} {r.url}")
           if r.status >= 400 else None)
    yield tab
    tab.close()
    assert problems == []


@pytest.fixture(scope="module")
def server(engine, database_url, tmp_path_factory):
    """gunicorn on the demo fleet, with a few decisions recorded."""
    port = free_port()
    process, log = start_gunicorn(port, database_url, tmp_path_factory.mktemp("gunicorn"))
    base = f"http://127.0.0.1:{port}"
    ids = []
    for service, name in (("nova", "gpu-2xh100-pinned"), ("nova", "cpu-general-purpose"),
                          ("cinder", "create-volume-default-type")):
        body = load_body(FIXTURES / service / f"{name}.json")
        status, _ = request(f"{base}/scheduler/{service}/external", body)
        assert status == 200
        ids.append(body["context"]["request_id"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = [json.loads(request(f"{base}/v1/decisions?request_id={i}")[1])["decisions"]
                 for i in ids]
        if all(found):
            break
        time.sleep(0.2)
    yield base
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=20)


def shot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_fleet_page(page, server):
    page.goto(f"{server}/ui")
    assert page.locator("h1").inner_text() == "Fleet"
    assert page.locator("#zones tbody tr").count() == 2
    gpu_rows = page.locator("#gpus tr.gpu-row")
    assert gpu_rows.count() >= 4
    assert "H100 SXM5 80GB" in page.locator("#gpus").inner_text()
    hosts = page.locator("#hosts-az-1 tbody tr")
    assert hosts.count() > 30
    page.fill('input[data-table="hosts-az-1"]', "cmp0008")  # the script filters as one types
    visible = page.locator("#hosts-az-1 tbody tr:visible")
    assert visible.count() == 1 and "0/8 H100" in visible.inner_text()
    page.fill('input[data-table="hosts-az-1"]', "")
    assert page.locator("#hosts-az-1 tbody tr:visible").count() == hosts.count()
    assert page.locator(".bar .fill").first.bounding_box()["height"] > 0
    shot(page, "fleet")


def test_host_page_without_topology(page, server):
    page.goto(f"{server}/ui")
    page.click("text=cmp0017")  # general purpose: no agent reports its topology
    assert page.url.endswith("/ui/hosts/cmp0017")
    assert page.locator("#no-topology").is_visible()
    allocations = page.locator("#allocations").inner_text()
    assert "MEMORY_MB" in allocations and "VCPU" in allocations
    shot(page, "host")


def test_decisions_filter_and_explanation(page, server):
    page.goto(f"{server}/ui/decisions")
    assert page.locator("#decision-table tr.decision").count() >= 3
    page.select_option('select[name="service"]', "nova")
    page.click("#decision-filters button")
    page.wait_for_url("**service=nova**")
    services = page.locator("#decision-table tr.decision td:nth-child(2)").all_inner_texts()
    assert services and set(services) == {"nova"}
    shot(page, "decisions")
    page.locator("#decision-table tr.decision a").first.click()
    page.wait_for_url("**/ui/decisions/*")
    summary = page.locator("#summary").inner_text()
    assert "first of" in summary and "answered" in summary
    assert page.locator("#step-matrix tbody tr").count() >= 2
    assert page.locator("#counterfactuals li").count() >= 1
    shot(page, "decision")


def test_decision_of_the_gpu_request_shows_removals(page, server):
    body = load_body(FIXTURES / "nova" / "gpu-2xh100-pinned.json")
    uuid = body["spec"]["nova_object.data"]["instance_uuid"]
    page.goto(f"{server}/ui/decisions?resource_id={uuid}")
    page.locator("#decision-table tr.decision a").first.click()
    removed = page.locator("#removed").inner_text()
    assert "cmp0002" in removed and "no PCPU inventory" in removed
    cell = page.locator("#step-matrix td.removed").first
    assert cell.is_visible() and "✗" in cell.inner_text()


def test_pipelines_page(page, server):
    page.goto(f"{server}/ui/pipelines")
    from cortex import conf
    from cortex.pipeline.config import load_pipelines

    shipped = load_pipelines(conf.shipped_file("pipelines.yaml")).pipelines
    assert page.locator("section.pipeline").count() == len(shipped) >= 9
    section = page.locator("#pipeline-kvm-gpu-bin-packing")
    assert "weigher_binpack" in section.inner_text()
    assert page.locator("#rules tbody tr").count() >= 4
    shot(page, "pipelines")


@pytest.fixture
def topology_server(engine, database_url):
    """An in-process server whose view holds a host with a reported HGX topology."""
    app = create_app(make_conf(**{"database.connection": database_url,
                                  "database.knowledge_check_interval": 3600.0}), engine=engine)
    cache = app.extensions["cortex"].knowledge
    fakes = {"cmp-hgx": topology_host("cmp-hgx", topology=hgx(in_use=(0, 1, 5))),
             "cmp-pairs": topology_host("cmp-pairs", topology=hgx(nvswitch=False, pairs={
                 (0, 1), (2, 3), (0, 2), (1, 3), (4, 5), (6, 7)}, in_use=(4,)))}
    cache._view = dataclasses.replace(
        cache.current, hosts=MappingProxyType(dict(cache.current.hosts) | fakes))
    server = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    app.extensions["cortex"].decisions.close()


def test_host_page_draws_the_topology(page, topology_server):
    page.goto(f"{topology_server}/ui/hosts/cmp-hgx")
    svg = page.locator("#topology-svg")
    box = svg.bounding_box()
    assert box["width"] > 600 and box["height"] > 150
    assert page.locator("#topology-svg g.gpu").count() == 8
    assert page.locator("#topology-svg g.gpu.used").count() == 3
    assert page.locator("#topology-svg g.cell").count() == 2
    assert "NVLink all-to-all" in svg.text_content()
    assert page.locator("#topology-matrix td.nv").count() == 56
    shot(page, "host-topology")


def test_host_page_draws_nvlink_pairs_as_arcs(page, topology_server):
    page.goto(f"{topology_server}/ui/hosts/cmp-pairs")
    assert page.locator("#topology-svg path.nvlink").count() == 6
    assert page.locator("#topology-svg path.pcie").count() == 0  # PXB pairs have NVLink
    assert page.locator("#topology-svg path.nvlink").first.bounding_box()["height"] > 10
    assert page.locator("#topology-matrix td.nv").count() == 12
    shot(page, "host-topology-pairs")

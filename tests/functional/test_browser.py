"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright.

gunicorn serves the demo fleet on the session's PostgreSQL database; every page is
opened, its content checked, and a screenshot saved under tests/artifacts/browser/. The
timeline's chart and the GPU heatmap are checked in the screenshots' pixels too, and their
live refresh (htmx polling the panels) by the requests and swaps it makes.
Playwright uses the system browser (/usr/bin/chromium, installed by tests/run.sh); its
own browser downloads are never used. A missing browser is a failure, never a skip.
"""

import dataclasses
import io
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from datetime import UTC, datetime
from types import MappingProxyType

import pytest
from werkzeug.serving import make_server

from cortex.api.app import create_app
from tests.api.conftest import make_conf
from tests.api.test_ui_forecasts import forecasts  # noqa: F401 - a fixture used below
from tests.api.test_ui_timeline import insert_decisions, recent_specs
from tests.conftest import FIXTURES, REPO, demo_database, load_body
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


# -- the scheduling timeline and the GPU heatmap, live -----------------------------------------

#: Counts a page's htmx swaps from its first script on: no swap is missed, none waited for
#: with a sleep.
COUNT_SWAPS = ("window.cortexSwaps = [];"
               "document.addEventListener('htmx:afterSwap',"
               " (e) => window.cortexSwaps.push(e.detail.target.id));")


@pytest.fixture(scope="module")
def timeline_server(tmp_path_factory):
    """gunicorn on a demo-fleet database of its own holding only the timeline's decisions.

    Those of tests/api/test_ui_timeline.py's ``recent_specs``: the chart draws the eight
    busiest series, and the session database holds whatever the tests before recorded.
    """
    with demo_database("browser_timeline") as (url, engine):
        with engine.begin() as connection:
            insert_decisions(connection, recent_specs(datetime.now(UTC)))
        port = free_port()
        process, _ = start_gunicorn(port, url, tmp_path_factory.mktemp("timeline"))
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)


def pixels(png):
    """``[(r, g, b)]`` of a PNG screenshot."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        data = image.convert("RGB").tobytes()
    return [tuple(data[i:i + 3]) for i in range(0, len(data), 3)]


def near(pixel, colour, tolerance=12):
    """Whether ``pixel`` is ``colour`` (``#rrggbb``) within ``tolerance`` per channel."""
    wanted = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, wanted, strict=True))


def wait_for_swaps(page, target, count=1):
    """Wait until htmx swapped ``target``'s content ``count`` times (COUNT_SWAPS counts)."""
    page.wait_for_function(
        f"() => window.cortexSwaps.filter((id) => id === '{target}').length >= {count}",
        timeout=15000)


def test_timeline_draws_stacked_bars_marks_errors_and_refreshes(page, timeline_server):
    page.add_init_script(COUNT_SWAPS)
    # drawn first on a page that does not refresh (a swap could detach what is looked at)
    page.goto(f"{timeline_server}/ui/timeline?refresh=0")
    assert page.locator("h1").inner_text().startswith("Scheduling timeline")
    chart = page.locator("#timeline-chart")
    box = chart.bounding_box()
    assert box["width"] >= 900 and box["height"] >= 240
    assert page.locator("#timeline-chart rect.seg").count() >= 4
    assert page.locator("#timeline-chart path.mark.error").count() >= 1
    assert page.locator("#timeline-chart path.mark.rejected").count() >= 1
    legend = page.locator("#timeline-legend").inner_text()
    assert "nova · tl-gpu-a" in legend and "cinder · tl-vol-b" in legend
    # drawn, not only in the DOM: the chart's own pixels hold the bars' colours
    drawn = pixels(chart.screenshot())
    coloured = sum(1 for p in drawn if max(p) - min(p) > 40)
    assert coloured > 500, f"{coloured} coloured pixels: the chart looks blank"
    assert sum(1 for p in drawn if near(p, "#c0392b")) > 50  # errors (503) in red
    assert sum(1 for p in drawn if near(p, "#f28e2b")) > 20  # refusals, hatched orange
    assert sum(1 for p in drawn if near(p, "#4e79a7") or near(p, "#59a14f")) > 100  # series
    errors = page.locator("#timeline-totals td.num.error a")
    assert errors.count() >= 1
    shot(page, "timeline")
    # live: htmx polls /ui/timeline/panel and swaps the panel in, chart and all
    with page.expect_request(lambda r: "/ui/timeline/panel?" in r.url, timeout=15000) as asked:
        page.goto(f"{timeline_server}/ui/timeline?refresh=1")
    assert "hours=1" in asked.value.url and "refresh=1" in asked.value.url
    wait_for_swaps(page, "timeline-panel")
    assert page.locator("#timeline-panel #timeline-chart rect.seg").count() >= 4
    assert page.locator("#timeline-chart").count() == 1  # swapped inside, not nested


def test_timeline_window_and_filters_from_the_form(page, timeline_server):
    page.goto(f"{timeline_server}/ui/timeline?refresh=0")
    page.select_option('select[name="hours"]', "6")
    page.select_option('select[name="service"]', "cinder")
    page.click("#timeline-filters button")
    page.wait_for_url("**hours=6**")
    assert "per 5 min, last 6 h" in page.locator("h1").inner_text()
    totals = page.locator("#timeline-totals tbody").inner_text()
    assert "cinder · tl-vol-b" in totals and "nova" not in totals
    assert page.locator("#timeline-panel[hx-get]").count() == 0  # refresh=0: not live


def test_gpu_heatmap_draws_states_and_islands_and_refreshes(page, server):
    page.add_init_script(COUNT_SWAPS)
    # drawn first on a page that does not refresh (a swap could detach what is looked at)
    page.goto(f"{server}/ui/gpus?refresh=0")
    assert page.locator("h1").inner_text().startswith("GPU occupancy")
    assert page.locator("#gpu-heatmap tr.gpu-host").count() >= 12
    for state, colour in (("free", "#e4f5ea"), ("used", "#e07b39")):
        cell = page.locator(f"#gpu-heatmap span.gpu.{state}:not(.placement)").first
        box = cell.bounding_box()
        assert box["width"] >= 12 and box["height"] >= 12
        centre = {"x": box["x"] + box["width"] / 2 - 2, "y": box["y"] + box["height"] / 2 - 2,
                  "width": 4, "height": 4}
        assert all(near(p, colour) for p in pixels(page.screenshot(clip=centre))), state
    assert page.locator("#gpu-heatmap span.gpu.partial").count() >= 3  # MIG on cmp0003
    # an NVSwitch board is one island: its box holds all 8 cells
    island = page.locator("#gpus-cmp0000 .island.nvlink")
    assert island.count() == 1
    outer = island.bounding_box()
    for cell in island.locator("span.gpu").all():
        inner = cell.bounding_box()
        assert outer["x"] <= inner["x"]
        assert inner["x"] + inner["width"] <= outer["x"] + outer["width"]
    assert page.locator("#gpus-cmp0004 .island.nvlink").count() == 0  # L40S: PCIe only
    shot(page, "gpus")
    with page.expect_request(lambda r: "/ui/gpus/panel?" in r.url, timeout=15000):
        page.goto(f"{server}/ui/gpus?refresh=1")
    wait_for_swaps(page, "gpu-panel")
    assert page.locator("#gpu-panel #gpu-heatmap tr.gpu-host").count() >= 12
    page.select_option('select[name="model"]', "L40S")
    page.click("#gpu-filters button")
    page.wait_for_url("**model=L40S**")
    models = page.locator("#gpu-heatmap tr.gpu-host td:nth-child(4)").all_inner_texts()
    assert models and set(models) == {"L40S"}


def test_forecasts_draw_demand_bands_supply_and_refresh(page, server, forecasts):  # noqa: F811
    page.add_init_script(COUNT_SWAPS)
    # drawn first on a page that does not refresh: a swap between finding an element and
    # taking its screenshot would detach it
    page.goto(f"{server}/ui/forecasts?refresh=0")
    assert page.locator("h1").inner_text().startswith("GPU demand ahead")
    sections = page.locator("section.forecast")
    assert sections.count() == len(forecasts)
    first = sections.first
    demand, in_use = first.locator("svg.forecast-demand"), first.locator("svg.forecast-in-use")
    # drawn, not only in the DOM: the interval band, the forecast and the supply in pixels
    drawn = pixels(demand.screenshot())
    assert sum(1 for p in drawn if near(p, "#c9d8f5")) > 300, "no interval band drawn"
    assert sum(1 for p in drawn if near(p, "#2457c5", 40)) > 50, "no forecast line drawn"
    assert sum(1 for p in drawn if near(p, "#8a93a3", 40)) > 50, "no history drawn"
    used = pixels(in_use.screenshot())
    shot(page, "forecasts")
    assert sum(1 for p in used if near(p, "#c0392b", 30)) > 100, "no supply line drawn"
    assert sum(1 for p in used if near(p, "#2457c5", 40)) > 50, "no projection drawn"
    assert page.locator("#energy tbody tr").count() >= 2  # az-1 and az-2 of the demo fleet
    with page.expect_request(lambda r: "/ui/forecasts/panel?" in r.url, timeout=15000):
        page.goto(f"{server}/ui/forecasts?refresh=1")
    wait_for_swaps(page, "forecasts-panel")
    assert page.locator("#forecasts-panel section.forecast").count() == len(forecasts)

"""The GPU occupancy heatmap (/ui/gpus) through the test client: states, islands, filters, caps.

The demo fleet's GPU hosts carry their agents' topology reports (etc/cortex/demo-fleet.yaml):
HGX H100 boards on NVSwitch, A100 PCIe with NVLink pairs, A100 split by MIG, L40S on
PCIe only; cmp0013 has GPUs in Placement but no report. Views with made-up hosts (an
unhealthy GPU, 10,000 hosts) are laid over the app's knowledge as in tests/api/test_ui.py.
"""

import dataclasses
import html
import re
from types import MappingProxyType

import pytest

from cortex.dashboard import gpus, views
from tests.api.test_contract import assert_error
from tests.fake_topology import hgx, split_by_mig, topology_host
from tests.fakes import host, inventory, view


def page(client, path):
    response = client.get(path)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    assert response.mimetype == "text/html"
    return html.unescape(response.get_data(as_text=True))


def rows(text):
    """``{host: row HTML}`` of the heatmap's host rows."""
    return dict(re.findall(r'<tr class="gpu-host [a-z]+" id="gpus-([^"]+)">(.*?)</tr>', text, re.S))


def islands(row):
    """Each island of a row as ``(nvlink, [cell states])``."""
    found = re.findall(r'<span class="island( nvlink)?">(.*?)</span></span>', row, re.S)
    return [(bool(nv), re.findall(r'<span class="gpu ([a-z]+)[^"]*"', cells))
            for nv, cells in found]


def with_hosts(app, monkeypatch, fakes, keep=True):
    """Lay ``fakes`` (HostStates) over the app's view (or replace its hosts)."""
    cache = app.extensions["cortex"].knowledge
    view = cache.view()
    hosts = (dict(view.hosts) if keep else {}) | {h.host: h for h in fakes}
    monkeypatch.setattr(cache, "_view", dataclasses.replace(view, hosts=MappingProxyType(hosts)))


def test_demo_gpu_hosts_are_drawn_with_their_states_and_nvlink_islands(client):
    text = page(client, "/ui/gpus")
    found = rows(text)
    assert "cmp0017" not in found  # general purpose: no GPUs
    assert islands(found["cmp0000"]) == [(True, ["free"] * 8)]  # NVSwitch: one island
    assert islands(found["cmp0008"]) == [(True, ["used"] * 8)]
    assert islands(found["cmp0001"]) == [(True, ["used"] * 4 + ["free"] * 4)]
    # A100 PCIe: the passed-through pair is not seen linked; the free pair is an island
    assert islands(found["cmp0002"]) == [(False, ["used"]), (False, ["used"]),
                                         (True, ["free", "free"])]
    mig = [s for _, cells in islands(found["cmp0003"]) for s in cells]
    assert mig.count("partial") == 3 and mig.count("used") == 1
    assert islands(found["cmp0004"]) == [(False, ["free"])] * 4  # L40S: PCIe only
    assert "L40S" in found["cmp0004"] and "4/4" in found["cmp0004"]
    # no agent report: the Placement counts, drawn dashed
    assert 'class="gpu used placement"' in found["cmp0013"]
    assert 'status down">down' in found["cmp0005"]
    summary = re.search(r'id="gpu-summary">(.*?)</p>', text, re.S).group(1)
    states = {s: int(n) for s, n in re.findall(r'class="count (\w+)">(\d+)', summary)}
    drawn = re.findall(r'<span class="gpu ([a-z]+)', "".join(found.values()))
    assert states == {s: drawn.count(s) for s in gpus.GPU_STATES}
    assert f"{len(found)} GPU hosts, {len(drawn)} GPUs" in summary


def test_heatmap_filters_by_zone_and_model(client):
    l40s = rows(page(client, "/ui/gpus?model=L40S"))
    assert set(l40s) == {"cmp0004", "cmp0015", "cmp0016"}
    assert all("<td>L40S</td>" in r for r in l40s.values())
    everything = rows(page(client, "/ui/gpus"))
    az2 = rows(page(client, "/ui/gpus?az=az-2"))
    assert set(az2) == {h for h, r in everything.items() if "<td>az-2</td>" in r}
    assert set(rows(page(client, "/ui/gpus?az=az-1"))) | set(az2) == set(everything)
    text = page(client, "/ui/gpus?az=nowhere")
    assert rows(text) == {} and "No GPU hosts match." in text and "0 GPU hosts, 0 GPUs" in text


def test_unhealthy_and_mig_gpus_and_nvlink_pairs(app, client, monkeypatch):
    pairs = hgx(nvswitch=False, pairs={(0, 1), (2, 3), (0, 2), (1, 3), (4, 5), (6, 7)},
                in_use=(4,), unhealthy=(7,))
    with_hosts(app, monkeypatch, [
        topology_host("zz-pairs", topology=pairs),
        topology_host("zz-mig", topology=split_by_mig(hgx(in_use=(0,)), 5))])
    found = rows(page(client, "/ui/gpus"))
    assert islands(found["zz-pairs"]) == [(True, ["free"] * 4), (True, ["used", "free"]),
                                          (True, ["free", "unhealthy"])]
    assert islands(found["zz-mig"]) == [(True, ["used"] + ["free"] * 4 + ["partial"]
                                         + ["free"] * 2)]
    assert "MIG 0/1 instances in use" in found["zz-mig"]


@pytest.fixture
def big_fleet(app, monkeypatch):
    """10,000 HGX hosts in two zones (one topology object shared, as the loader shares them)."""
    board = hgx(in_use=(0, 1, 2))
    fleet = [topology_host(f"gpu{i:05d}", topology=board, az=f"az-{i % 2 + 1}")
             for i in range(10000)]
    with_hosts(app, monkeypatch, fleet, keep=False)
    return fleet


def test_a_ten_thousand_host_fleet_is_paged_with_bounded_html(client, big_fleet):
    response = client.get("/ui/gpus")
    text = html.unescape(response.get_data(as_text=True))
    assert len(rows(text)) == views.HEATMAP_ROWS and "page 1 of 100" in text
    assert len(response.get_data()) < 200_000
    assert "10000 GPU hosts, 80000 GPUs" in text and "30000 used" in text
    assert 'href="/ui/gpus?page=2" rel="next"' in text and 'rel="prev"' not in text
    widest = client.get(f"/ui/gpus?per_page={views.MAX_HEATMAP_ROWS}&az=az-2&page=3")
    widest_text = html.unescape(widest.get_data(as_text=True))
    shown = rows(widest_text)
    assert len(shown) == views.MAX_HEATMAP_ROWS and len(widest.get_data()) < 500_000
    assert "page 3 of 20" in widest_text and all(int(h[3:]) % 2 == 1 for h in shown)
    assert 'href="/ui/gpus?page=4&az=az-2&per_page=250" rel="next"' in widest_text
    last = html.unescape(client.get("/ui/gpus?page=999").get_data(as_text=True))
    assert "page 100 of 100" in last and "gpu09999" in rows(last)  # past the end: the last


def test_the_panel_is_the_live_fragment_of_the_page(client):
    text = page(client, "/ui/gpus?model=L40S&refresh=5")
    assert ('hx-get="/ui/gpus/panel?model=L40S&refresh=5" hx-trigger="every 5s" '
            'hx-swap="innerHTML"') in text
    response = client.get("/ui/gpus/panel?model=L40S")
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    panel = html.unescape(response.get_data(as_text=True))
    assert "<html" not in panel and set(rows(panel)) == {"cmp0004", "cmp0015", "cmp0016"}
    assert "hx-get" not in page(client, "/ui/gpus?refresh=0")


@pytest.mark.parametrize("query", ["per_page=0", "per_page=251", "per_page=many", "page=0",
                                   "page=-2", "page=first", "refresh=-1", "refresh=2s"])
@pytest.mark.parametrize("path", ["/ui/gpus", "/ui/gpus/panel"])
def test_bad_query_arguments_are_a_short_400(module_client, path, query):
    response = module_client.get(f"{path}?{query}", headers={"Accept": "text/html"})
    error = assert_error(response, 400)
    assert len(response.get_data()) < 400 and query.split("=")[0] in error["detail"]


def test_gpu_states():
    board = split_by_mig(hgx(in_use=(1,), unhealthy=(2,)), 3)
    assert [gpus.gpu_state(g) for g in board.gpus[:5]] == [
        "free", "used", "unhealthy", "partial", "free"]
    full = dataclasses.replace(board.gpus[3], mig_instances=tuple(
        dataclasses.replace(i, in_use=True) for i in board.gpus[3].mig_instances))
    assert gpus.gpu_state(full) == "used"
    assert gpus.gpu_state(dataclasses.replace(board.gpus[0], vgpus_in_use=2)) == "partial"
    assert gpus.gpu_state(dataclasses.replace(board.gpus[1], healthy=False)) == "unhealthy"


def test_hosts_without_a_report_count_their_placement_gpus():
    plain = host("pl", inventories={"CUSTOM_PCI_10DE_26B9": inventory(4, used=3),
                                    "VGPU": inventory(16, used=2), "VCPU": inventory(64)})
    vgpu_only = host("vg", inventories={"VGPU": inventory(16, used=2)})
    found = {r.host.host: r for r in gpus.gpu_hosts(view(plain, vgpu_only))}
    assert set(found) == {"pl"}
    assert found["pl"].counts == {"free": 1, "used": 3, "partial": 0, "unhealthy": 0}
    assert found["pl"].models == ("L40S",) and found["pl"].source == "placement"

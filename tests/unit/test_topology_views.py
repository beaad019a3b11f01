"""Reading a host's topology for the dashboard's pictures and the NVLink placement counter."""

import pytest

from cortex.dashboard.topology import pair_links, topology_layout, topology_matrix
from cortex.rules.gpu_sets import can_place_connected
from cortex.scheduler.recorder import gpu_placement
from tests.fake_topology import address, hgx, split_by_mig, topology_host
from tests.fakes import host, nova, view


def test_the_ui_reads_the_host_topology_itself():
    topology = hgx(in_use=(0, 1))
    layout = topology_layout(topology)
    assert layout["cells"][0].lines == ("NUMA 0, socket 0", "112 CPUs, 104 dedicated, 16 pinned",
                                        "1 TiB, 256 GiB used")
    assert [g.lines[1] for g in layout["gpus"]] == [address(i) for i in range(8)]
    assert [g.css for g in layout["gpus"]][:3] == ["gpu used", "gpu used", "gpu free"]
    assert len(pair_links(topology)) == 28  # each pair once, though the mapping holds both
    assert layout["mig"] == []


# in use, NVLink pairs (None: NVSwitch), request size -> can place connected
@pytest.mark.parametrize("in_use, pairs, count, expected", [
    ((), None, 8, True),
    ((0,), None, 8, False),               # only seven free
    ((0, 1, 2, 3), None, 4, True),
    ((), {(0, 1), (2, 3)}, 2, True),
    ((0, 2), {(0, 1), (2, 3)}, 2, False),  # the free GPUs are not NVLink pairs
    ((), {(0, 1), (1, 2)}, 3, False),      # a chain is not a clique
    ((), {(0, 1), (1, 2), (0, 2)}, 3, True),
    ((), set(), 1, True),
])
def test_can_place_connected(in_use, pairs, count, expected):
    topology = hgx(in_use=in_use, nvswitch=pairs is None, pairs=pairs)
    assert can_place_connected(topology, count) is expected


def test_unhealthy_gpus_are_not_free():
    topology = hgx(unhealthy=(7,))
    assert can_place_connected(topology, 7) and not can_place_connected(topology, 8)


def test_gpus_split_by_mig_are_not_free_for_passthrough():
    split = split_by_mig(hgx(), 0)
    assert topology_layout(split)["mig"] == [(address(0), ["3g.40gb"])]
    assert not split.gpus[0].passthrough
    assert can_place_connected(split, 7) and not can_place_connected(split, 8)


def test_layout_draws_nvswitch_as_one_bar_and_pairs_as_arcs():
    switch = topology_layout(hgx())
    assert switch["bar"] and not switch["arcs"] and len(switch["bar"]["xs"]) == 8
    assert len(switch["cells"]) == 2 and len(switch["gpus"]) == 8
    assert "used" in switch["gpus"][0].css or "free" in switch["gpus"][0].css
    pairs = topology_layout(hgx(nvswitch=False, pairs={(0, 1), (4, 6)}))
    assert pairs["bar"] is None
    kinds = sorted(a["css"] for a in pairs["arcs"])
    # two NVLink pairs; PIX/PXB neighbours (0-1, 2-3, 4-5, 6-7) as PCIe, 0-1 is NVLink
    assert kinds == ["nvlink", "nvlink", "pcie", "pcie", "pcie"]
    assert all(a["path"].startswith("M ") for a in pairs["arcs"])


def test_matrix_reads_like_nvidia_smi_topo():
    matrix = topology_matrix(hgx(nvswitch=False, pairs={(0, 1)}))
    first = dict(zip(matrix["addresses"], matrix["rows"][0][1], strict=True))
    assert first[address(0)] == "X" and first[address(1)] == "NV4"
    assert first[address(2)] == "NODE" and first[address(4)] == "SYS"
    assert dict(zip(matrix["addresses"], matrix["rows"][2][1], strict=True))[address(3)] == "PXB"


@pytest.mark.parametrize("fixture, in_use, hosts, expected", [
    ("gpu-2xh100-pinned", (), ["cmp-topo"], True),
    ("gpu-8xh100-full-node", (3,), ["cmp-topo"], False),
    ("gpu-2xh100-pinned", (), ["plain"], None),       # no topology reported
    ("gpu-1xa100-numa", (), ["cmp-topo"], None),      # a single GPU
    ("cpu-general-purpose", (), ["cmp-topo"], None),
    ("gpu-2xh100-pinned", (), [], None),              # nothing answered
])
def test_gpu_placement_counts_only_multi_gpu_requests_on_reporting_hosts(fixture, in_use, hosts,
                                                                          expected):
    fleet = view(topology_host("cmp-topo", topology=hgx(in_use=in_use)), host("plain"))
    assert gpu_placement(nova(fixture), fleet, hosts) is expected


def test_the_gpu_count_is_what_nova_compute_claims():
    # the spec's PCI request and a Placement request group are two demands: Nova's
    # filters and its claim count both, and so does every GPU rule of Cortex
    request = nova("gpu-2xh100-pinned", flavor={"extra_specs": {
        "resources:CUSTOM_PCI_10DE_2330": "1"}})
    assert request.gpu_count == 3

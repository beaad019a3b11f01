"""Reading a host's topology for pictures and NVLink KPIs (a fake shaped like the real one)."""

import dataclasses

import pytest

from cortex.api.scheduler import gpu_placement, requested_gpus
from cortex.api.ui import topology_layout, topology_matrix
from cortex.knowledge.topology_picture import (
    can_place_connected,
    nvlink_connected,
    picture,
)
from tests.fake_topology import Mig, address, hgx, topology_host
from tests.fakes import host, nova, view


def test_no_topology_no_picture():
    assert picture(host("plain")) is None
    assert picture(topology_host(topology=None)) is not None  # the fake defaults to an HGX
    assert picture(None) is None


def test_picture_of_an_hgx_host():
    drawn = picture(topology_host(topology=hgx(in_use=(0, 1))))
    assert [c.id for c in drawn.cells] == [0, 1]
    assert drawn.cells[0].cpus == 112 and drawn.cells[0].dedicated == 104
    assert drawn.cells[0].pinned == 16 and drawn.cells[0].memory_used_mb == 262144
    assert [g.cell for g in drawn.gpus] == [0] * 4 + [1] * 4
    assert [g.in_use for g in drawn.gpus][:3] == [True, True, False]
    assert len(drawn.links) == 28  # each pair once, though the mapping holds both orders
    assert drawn.link(address(3), address(0)).nvlink == 18


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
    assert can_place_connected(picture(topology_host(topology=topology)), count) is expected


def test_unhealthy_gpus_are_not_free():
    topology = picture(topology_host(topology=hgx(unhealthy=(7,))))
    assert can_place_connected(topology, 7) and not can_place_connected(topology, 8)


def test_gpus_split_by_mig_are_not_free_for_passthrough():
    topology = hgx()
    split = dataclasses.replace(topology, gpus=tuple(
        dataclasses.replace(g, passthrough=False, mig_instances=(Mig("3g.40gb"),))
        if i == 0 else g for i, g in enumerate(topology.gpus)))
    drawn = picture(topology_host(topology=split))
    assert drawn.gpus[0].mig == ("3g.40gb",) and not drawn.gpus[0].passthrough
    assert can_place_connected(drawn, 7) and not can_place_connected(drawn, 8)


def test_nvlink_connected_sets():
    drawn = picture(topology_host(topology=hgx(nvswitch=False, pairs={(0, 1)})))
    assert nvlink_connected(drawn, [address(0), address(1)])
    assert not nvlink_connected(drawn, [address(0), address(2)])


def test_layout_draws_nvswitch_as_one_bar_and_pairs_as_arcs():
    switch = topology_layout(picture(topology_host(topology=hgx())))
    assert switch["bar"] and not switch["arcs"] and len(switch["bar"]["xs"]) == 8
    assert len(switch["cells"]) == 2 and len(switch["gpus"]) == 8
    assert "used" in switch["gpus"][0].css or "free" in switch["gpus"][0].css
    pairs = topology_layout(picture(topology_host(topology=hgx(nvswitch=False,
                                                                pairs={(0, 1), (4, 6)}))))
    assert pairs["bar"] is None
    kinds = sorted(a["css"] for a in pairs["arcs"])
    # two NVLink pairs; PIX/PXB neighbours (0-1, 2-3, 4-5, 6-7) as PCIe, 0-1 is NVLink
    assert kinds == ["nvlink", "nvlink", "pcie", "pcie", "pcie"]
    assert all(a["path"].startswith("M ") for a in pairs["arcs"])


def test_matrix_reads_like_nvidia_smi_topo():
    matrix = topology_matrix(picture(topology_host(topology=hgx(nvswitch=False,
                                                                 pairs={(0, 1)}))))
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


def test_requested_gpus_does_not_add_both_spellings():
    request = nova("gpu-2xh100-pinned", flavor={"extra_specs": {
        "pci_passthrough:alias": "h100:2", "resources:CUSTOM_PCI_10DE_2330": "2"}})
    assert requested_gpus(request) == 2

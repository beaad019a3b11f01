"""The model of nova-compute's PCI claim: cells in Nova's order, one pool per device.

Nova 34's own claim is the authority: tests/differential/test_nova_claims.py.
"""

import pytest

from cortex.rules.device_choice import nova_cell_order, predict_claim, vgpu_parent
from cortex.rules.pci_fit import device_pools, take_devices
from tests.gpu_fakes import A100, board_topology, gpu_request

HGX = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",   # node 0
       "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")   # node 1


def test_every_device_is_a_pool_in_address_order_taken_first_come():
    topology = board_topology("hgx-h100-8gpu")
    pools = device_pools(topology)
    assert [(p.numa_node, p.addresses, count) for p, count in pools] == [
        (0 if i < 4 else 1, (address,), 1) for i, address in enumerate(HGX)]
    floating = gpu_request(gpus=3, pinned=False, numa_nodes=0)   # no NUMA: no affinity
    assert take_devices(topology, floating.pci_devices) == HGX[:3]


def test_a_tracked_order_puts_each_device_where_the_tracker_first_saw_it():
    topology = board_topology("hgx-h100-8gpu")
    order = {a: i for i, a in enumerate(HGX)} | {HGX[0]: 99}     # 18 was added last
    floating = gpu_request(gpus=1, pinned=False, numa_nodes=0)
    assert take_devices(topology, floating.pci_devices, order=order) == (HGX[1],)


def test_devices_of_the_next_node_follow_when_the_guest_has_no_numa_topology():
    topology = board_topology("hgx-h100-8gpu", in_use=HGX[:3])
    floating = gpu_request(gpus=2, pinned=False, numa_nodes=0)
    assert take_devices(topology, floating.pci_devices) == (HGX[3], HGX[4])


@pytest.mark.parametrize("policy, cells, expected", [
    ("legacy", (1,), (HGX[4], HGX[5])),       # only the guest's cell
    ("required", (0,), (HGX[0], HGX[1])),
    ("socket", (1,), (HGX[4], HGX[5])),        # one node per socket: the same cell
])
def test_numa_policy_narrows_the_pools_to_the_guests_cells(policy, cells, expected):
    topology = board_topology("hgx-h100-8gpu")
    request = gpu_request(gpus=2, policy=policy)
    assert take_devices(topology, request.pci_devices, cells) == expected


def test_preferred_takes_local_devices_first_then_any():
    topology = board_topology("hgx-h100-8gpu", in_use=HGX[4:7])   # node 1: one free
    request = gpu_request(gpus=2, policy="preferred")
    assert take_devices(topology, request.pci_devices, (1,)) == (HGX[7], HGX[0])
    assert take_devices(topology, gpu_request(gpus=2).pci_devices, (1,)) is None  # legacy


def test_nova_cell_order_spreads_then_puts_the_cells_with_more_free_devices_first():
    topology = board_topology("hgx-h100-8gpu", pinned={0: 10})
    pinned = gpu_request(gpus=1).guest_numa
    # the same free devices: the cell with more free pinnable CPUs first (spread) ...
    assert nova_cell_order(topology, pinned, True) == (1, 0)
    assert nova_cell_order(topology, pinned, True, pack=True) == (0, 1)
    # ... unless the other has more free devices, which decides for a guest with devices
    busy = board_topology("hgx-h100-8gpu", pinned={0: 10}, in_use=HGX[5:])
    assert nova_cell_order(busy, pinned, True) == (0, 1)
    assert nova_cell_order(busy, pinned, False) == (1, 0)   # no devices: keep them free


def test_predict_claim_places_cells_then_devices():
    topology = board_topology("hgx-h100-8gpu", pinned={0: 10})
    claim = predict_claim(topology, gpu_request(gpus=2, vcpus=16))
    assert claim.cells == (1,) and claim.devices == (HGX[4], HGX[5])
    eight = predict_claim(topology, gpu_request(gpus=8, numa_nodes=2, vcpus=32))
    assert sorted(eight.devices) == list(HGX) and sorted(eight.cells) == [0, 1]
    assert predict_claim(topology, gpu_request(gpus=8, numa_nodes=1)) is None  # legacy: 4/node


def test_predict_claim_follows_the_pci_check_into_another_cell():
    # cell 1 has more free CPUs but no free GPU: Nova's first fitting assignment with PCI
    topology = board_topology("hgx-h100-8gpu", pinned={0: 50}, in_use=HGX[4:])
    claim = predict_claim(topology, gpu_request(gpus=1, vcpus=8))
    assert claim.cells == (0,) and claim.devices == (HGX[0],)


def test_unhealthy_gpus_are_pooled_as_nova_does():
    topology = board_topology("a100-pcie-4gpu-nvlink-pairs")
    from dataclasses import replace

    sick = replace(topology, gpus=tuple(replace(g, healthy=g.pci_address != "0000:17:00.0")
                                        for g in topology.gpus))
    request = gpu_request(gpus=1, pinned=False, numa_nodes=0, products=(A100,))
    # Nova knows nothing of health: the unhealthy 17 is first and handed out
    assert take_devices(sick, request.pci_devices) == ("0000:17:00.0",)


@pytest.mark.parametrize("free, count, expected", [
    ([4, 4], 1, 0), ([1, 4], 2, 1), ([1, 1], 2, None), ([0, 3, 4], 3, 1), ([], 1, None)])
def test_vgpu_parent_is_the_first_gpu_with_room(free, count, expected):
    assert vgpu_parent(free, count) == expected

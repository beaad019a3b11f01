"""GPU weighers, table by table: pair levels, set quality, usefulness, locality, load, energy."""

import math
from dataclasses import replace

import pytest

from cortex.knowledge.topology import topology_from_report
from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.gpu_affinity import GpuAffinityWeigher
from cortex.plugins.weighers.gpu_energy import GpuEnergyWeigher
from cortex.plugins.weighers.gpu_fragmentation import GpuFragmentationWeigher
from cortex.plugins.weighers.gpu_load import GpuLoadWeigher
from cortex.plugins.weighers.numa_locality import NumaLocalityWeigher
from cortex.plugins.weighers.pci import PCIWeigher
from cortex.rules.gpu_sets import GpuMap, gpu_map, vgpu_usefulness
from tests.fakes import host, inventory, view
from tests.gpu_fakes import A100, L40S, board_topology, gpu_host, gpu_request, weigh
from tests.topology_fakes import cell, gpu

HGX = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
       "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
A100S = ("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0")
SIZES = ((1, 0.4), (2, 0.2), (4, 0.2), (8, 0.2))


def make(cls, **options):
    return cls(build_options(cls, options))


# -- the pair matrix ---------------------------------------------------------------------

def npsx_topology():
    """Two NUMA nodes on one socket and one on another; GPUs without link reports."""
    cells = [cell(0, socket=0), cell(1, socket=0), cell(2, socket=1)]
    return topology_from_report({"numa_cells": cells, "gpus": [
        gpu("0000:01:00.0", 0), gpu("0000:02:00.0", 1), gpu("0000:03:00.0", 2)],
        "gpu_links": [{"a": "0000:01:00.0", "b": "0000:02:00.0", "nvlink": 0,
                       "topology": "MULTIPLE"}]})


@pytest.mark.parametrize("topology, a, b, level", [
    (board_topology("hgx-h100-8gpu"), 0, 7, "nvlink"),          # NVSwitch, across sockets
    (board_topology("a100-pcie-4gpu-nvlink-pairs"), 2, 3, "nvlink"),   # bridge
    (board_topology("a100-pcie-4gpu-nvlink-pairs"), 1, 2, "cross_socket"),
    (board_topology("l40s-4gpu-pcie"), 0, 1, "numa_node"),       # NODE: same node
    (board_topology("l40s-4gpu-pcie"), 0, 0, "same_gpu"),
    (npsx_topology(), 0, 1, "pcie_switch"),                      # MULTIPLE
    (npsx_topology(), 1, 2, "cross_socket"),
    (npsx_topology(), 0, 2, "cross_socket"),
])
def test_pair_levels(topology, a, b, level):
    assert gpu_map(topology).levels[a][b] == level


def test_pair_across_numa_nodes_of_one_socket():
    cells = [cell(0, socket=0), cell(1, socket=0)]
    topology = topology_from_report({"numa_cells": cells, "gpus": [
        gpu("0000:01:00.0", 0), gpu("0000:02:00.0", 1)], "gpu_links": [
        {"a": "0000:01:00.0", "b": "0000:02:00.0", "nvlink": 0, "topology": "SYSTEM"}]})
    assert gpu_map(topology).levels[0][1] == "cross_numa"


def test_maps_are_shared_by_hosts_equal_in_gpus_nodes_and_links():
    topology = board_topology("hgx-h100-8gpu")
    used = replace(topology, gpus=tuple(replace(g, in_use=True) for g in topology.gpus))
    assert gpu_map(topology) is gpu_map(used)            # usage aside, the same host
    assert gpu_map(board_topology("hgx-h100-8gpu")) is gpu_map(topology)  # same model
    moved = replace(topology, gpus=tuple(replace(g, numa_node=1 - g.numa_node)
                                         for g in topology.gpus))
    assert gpu_map(moved) is not gpu_map(topology)       # other NUMA nodes: its own map
    assert gpu_map(moved).nodes == tuple(g.numa_node for g in moved.gpus)


@pytest.mark.parametrize("board, free, k, how, quality", [
    ("hgx-h100-8gpu", HGX, 4, "weakest", 0.9),
    ("a100-pcie-4gpu-nvlink-pairs", A100S, 2, "weakest", 0.9),
    ("a100-pcie-4gpu-nvlink-pairs", A100S, 4, "weakest", 0.1),
    ("a100-pcie-4gpu-nvlink-pairs", A100S, 4, "mean", (0.9 * 2 + 0.1 * 4) / 6),
    ("a100-pcie-4gpu-nvlink-pairs", A100S[1:], 2, "weakest", 0.9),     # b1 + ca
    ("l40s-4gpu-pcie", ("0000:01:00.0", "0000:81:00.0", "0000:a1:00.0"), 2, "weakest", 0.5),
])
def test_best_set(board, free, k, how, quality):
    gpus = gpu_map(board_topology(board))
    value, _ = gpus.best_set(gpus.mask(free), k, how=how)
    assert math.isclose(value, quality)


@pytest.mark.parametrize("free, span, expected", [
    (HGX, True, 8.0),                     # every GPU serves 1, 2, 4 and 8
    (HGX[1:], True, 3 * 0.6 + 4 * 0.8),   # node 0: 3 (serve 1, 2), node 1: 4 (1, 2, 4)
    (HGX[1:], False, 7 * 0.8),            # any span: 7 NVLink GPUs serve 1, 2, 4
    (HGX[:2] + HGX[4:6], True, 4 * 0.6),  # 2 + 2: no 4 on one node
    ((), True, 0.0),
])
def test_usefulness_on_an_nvswitch_board(free, span, expected):
    gpus = gpu_map(board_topology("hgx-h100-8gpu"))
    assert math.isclose(gpus.usefulness(gpus.mask(free), SIZES, "numa_node", span), expected)


def test_usefulness_needs_the_pairs_level():
    pairs = gpu_map(board_topology("a100-pcie-4gpu-nvlink-pairs"))
    free = pairs.mask(A100S)
    assert math.isclose(pairs.usefulness(free, SIZES, "numa_node"), 4 * 0.6)
    assert math.isclose(pairs.usefulness(free, SIZES, "nvlink"), 4 * 0.6)   # bridged pairs
    pcie = gpu_map(board_topology("l40s-4gpu-pcie"))
    assert math.isclose(pcie.usefulness(pcie.mask(pcie.addresses), SIZES, "numa_node"),
                        4 * 0.6)
    assert math.isclose(pcie.usefulness(pcie.mask(pcie.addresses), SIZES, "nvlink"), 4 * 0.4)
    gpus = pairs
    assert gpus.clique_sizes(free, "cross_socket") == (4, 4, 4, 4)
    assert gpus.clique_sizes(free, "cross_socket", nodes=1) == (2, 2, 2, 2)


def test_vgpu_usefulness_counts_capacity_that_fits_the_sizes():
    sizes = ((1, 0.5), (2, 0.3), (4, 0.2))
    assert math.isclose(vgpu_usefulness([4, 1], sizes, 4), (0.5 * 5 + 0.3 * 4 + 0.2 * 4) / 4)
    assert vgpu_usefulness([0, 0], sizes, 4) == 0


def test_gpu_map_of_a_host_without_gpus():
    gpus = GpuMap.build(topology_from_report({"numa_cells": [cell(0)]}))
    assert gpus.per_node == 0 and gpus.usefulness(0, SIZES, "numa_node") == 0


# -- weigher_gpu_affinity ------------------------------------------------------------------

FLOATING = {"pinned": False, "numa_nodes": 0}


@pytest.mark.parametrize("board, in_use, request_args, options, expected", [
    ("hgx-h100-8gpu", (), {}, {}, 0.9),
    ("a100-pcie-4gpu-nvlink-pairs", (), {"products": (A100,)}, {}, 0.9),
    # nova-compute takes 31 (node 0's pool) then ca: across sockets; b1 + ca was best
    ("a100-pcie-4gpu-nvlink-pairs", A100S[:1], {"products": (A100,), **FLOATING}, {}, 0.1),
    ("a100-pcie-4gpu-nvlink-pairs", A100S[:1], {"products": (A100,), **FLOATING},
     {"devices": "best"}, 0.9),
    ("l40s-4gpu-pcie", (), {"products": (L40S,)}, {}, 0.5),
    ("l40s-4gpu-pcie", (), {"products": (L40S,)}, {"pair_scores": {"numa_node": 0.6}}, 0.6),
    ("l40s-4gpu-pcie", (), {"gpus": 4, "numa_nodes": 2, "policy": "preferred",
                            "products": (L40S,)}, {}, 0.1),
    ("l40s-4gpu-pcie", (), {"gpus": 4, "numa_nodes": 2, "policy": "preferred",
                            "products": (L40S,)}, {"set_quality": "mean"}, (1.0 + 0.4) / 6),
    # one GPU: locality to the guest's CPUs
    ("hgx-h100-8gpu", (), {"gpus": 1}, {}, 1.0),
    ("hgx-h100-8gpu", (), {"gpus": 1, "vcpus": 32, **FLOATING}, {}, 0.5),  # 16 shared / 32
    ("hgx-h100-8gpu", (), {"gpus": 1, "vcpus": 32, **FLOATING}, {"devices": "best"}, 0.5),
])
def test_gpu_affinity(board, in_use, request_args, options, expected):
    state = gpu_host(board=board, in_use=in_use)
    value = weigh(make(GpuAffinityWeigher, **options), state, gpu_request(**request_args))
    assert math.isclose(value, expected)


def test_gpu_affinity_one_gpu_away_from_the_guests_cell():
    # preferred: the guest fits only cell 1 (cell 0's CPUs are pinned), its GPU is on cell 0
    state = gpu_host(in_use=HGX[4:], pinned={0: 98})
    request = gpu_request(gpus=1, policy="preferred", vcpus=8)
    assert math.isclose(weigh(GpuAffinityWeigher(), state, request), 0.1)   # across sockets


def test_gpu_affinity_needs_gpus_and_a_report():
    assert not GpuAffinityWeigher().applies(gpu_request(gpus=0, vgpus=1))
    assert weigh(GpuAffinityWeigher(), host("h"), gpu_request()) == 0.0


@pytest.mark.parametrize("cls, options, message", [
    (GpuAffinityWeigher, {"pair_scores": {"nvswitch": 0.9}}, "unknown level"),
    (GpuAffinityWeigher, {"pair_scores": {"nvlink": 1.5}}, r"\[0, 1\]"),
    (GpuAffinityWeigher, {"set_quality": "median"}, "set_quality"),
    (GpuAffinityWeigher, {"devices": "all"}, "devices"),
    (GpuFragmentationWeigher, {"request_sizes": {"one": 1.0}}, "counts"),
    (GpuFragmentationWeigher, {"vgpu_sizes": {"1": 0.0}}, "not all 0"),
    (GpuFragmentationWeigher, {"min_link": "pcie"}, "min_link"),
    (GpuFragmentationWeigher, {"scale": 0.0}, "scale"),
    (NumaLocalityWeigher, {"headroom": 0.5}, "headroom"),
    (GpuLoadWeigher, {"temperature_bounds": [90.0, 60.0]}, "temperature_bounds"),
    (GpuLoadWeigher, {"requests": "all"}, "requests"),
    (GpuEnergyWeigher, {"default_busy_watts": 10.0}, "exceed"),
    (PCIWeigher, {"max_devices": 0}, "max_devices"),
])
def test_options_are_validated(cls, options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(cls, options)


# -- weigher_gpu_fragmentation -------------------------------------------------------------

NO_FEED = {"cpus_per_gpu": 0.0, "memory_mb_per_gpu": 0.0}


def test_fragmentation_keeps_a_fully_free_nvswitch_host_for_big_requests():
    one = gpu_request(gpus=1)
    free = weigh(GpuFragmentationWeigher(), gpu_host(), one)
    half = weigh(GpuFragmentationWeigher(), gpu_host(in_use=HGX[:4]), one)
    # sizes 1/2/4/8 at .4/.2/.2/.2, 4 GPUs a node. 8 free: F = 0 before; after, node 0
    # has 3 (serve 1, 2: .6 each), node 1 has 4 (.8 each): F = 7 - 5.0.
    # 4 free on node 1: F = 4 - 3.2 before, 3 - 1.8 after: 1.2 - 0.8.
    assert math.isclose(free, -2.0) and math.isclose(half, -0.4)
    assert half > free


def test_fragmentation_rewards_taking_gpus_that_were_fragments():
    one = gpu_request(gpus=1, products=(A100,), **FLOATING)
    breaks = gpu_host(board="a100-pcie-4gpu-nvlink-pairs", in_use=A100S[3:])   # b1 alone
    keeps = gpu_host(board="a100-pcie-4gpu-nvlink-pairs", in_use=A100S[1:2])   # 17 alone
    # F = free - U; a GPU of a free NVLink pair serves 1 and 2 (.6), a lone GPU 1 (.4).
    # Nova takes the last free GPU of the first pool (node 0). breaks: the 17-31 pair and
    # b1, F = 3 - 1.6; 31 goes and 17 is left alone: 2 - 0.8, F falls 0.2. keeps: 17
    # alone and the b1-ca pair; 17 goes: 2 - 1.2, F falls 0.6.
    plugin = make(GpuFragmentationWeigher, **NO_FEED)
    assert math.isclose(weigh(plugin, breaks, one), 0.2)
    assert math.isclose(weigh(plugin, keeps, one), 0.6)
    assert math.isclose(weigh(make(GpuFragmentationWeigher, scale=2.0, **NO_FEED), keeps, one),
                        0.3)
    # this board has no VCPU inventory: a floating shared guest's GPUs are all unfed
    assert weigh(GpuFragmentationWeigher(), keeps, one) == 1.0


def vgpu_host(first_gpu_used, **board_changes):
    """An L40S host of time-sliced GPUs of 4 vGPUs, its first GPU with vGPUs in use."""
    state = gpu_host(board="l40s-4gpu-pcie", board_changes={"vgpu_slots": 4, **board_changes})
    gpus = tuple(replace(g, vgpus_in_use=first_gpu_used if i == 0 else 0)
                 for i, g in enumerate(state.topology.gpus))
    return replace(state, topology=replace(state.topology, gpus=gpus))


def test_fragmentation_of_vgpu_capacity_packs_partly_used_gpus():
    one = gpu_request(gpus=0, vgpus=1)
    plugin = make(GpuFragmentationWeigher, **NO_FEED)
    # sizes 1/2/4 vGPUs at .5/.3/.2 on 4-vGPU GPUs, 1/4 GPU asked. [1, 4, 4, 4] free:
    # F = 3.25 - 3.125 -> [0, 4, 4, 4]: 0, so +0.125 / 0.25; [4]*4: 0 -> 3.75 - 3.6.
    assert math.isclose(weigh(plugin, vgpu_host(3), one), 0.5)
    assert math.isclose(weigh(plugin, vgpu_host(0), one), -0.6)
    assert weigh(plugin, vgpu_host(0), gpu_request(gpus=0, vgpus=5)) == 0


def test_fragmentation_of_vgpu_capacity_the_host_cannot_feed():
    # 64 CPUs feed a GPU (16 a vGPU): the host's free PCPUs feed fewer vGPUs than it has,
    # and a guest of 48 vCPUs for one vGPU strands two more vGPUs than the one it takes.
    from cortex.rules.fragmentation import (
        SharedGpu,
        fed_shared,
        shared_fragment,
    )

    greedy = gpu_request(gpus=0, vgpus=1, vcpus=48, memory_mb=1024)
    state = vgpu_host(0)
    pcpus = state.all_nodes[0].inventories["PCPU"].free
    assert 0 < pcpus // 16 < 16
    plugin = make(GpuFragmentationWeigher, cpus_per_gpu=64.0, memory_mb_per_gpu=0.0)
    sizes = plugin.model.vgpu_sizes
    before = fed_shared([SharedGpu(4, 4, 4)] * 4, pcpus // 16 / 4)
    after = fed_shared([SharedGpu(3, 4, 3)] + [SharedGpu(4, 4, 4)] * 3, (pcpus - 48) // 16 / 4)
    expected = -(shared_fragment(after, sizes) - shared_fragment(before, sizes)) / 0.25
    starved = weigh(plugin, state, greedy)
    assert math.isclose(starved, expected)
    assert starved < weigh(make(GpuFragmentationWeigher, **NO_FEED), state, greedy) - 1.0
    # fed capacity is counted from the first GPUs on; the rest is fragment
    assert fed_shared([SharedGpu(4, 4, 4)] * 2, 1.5) == [SharedGpu(4, 4, 4, 4),
                                                         SharedGpu(4, 4, 2, 2)]


def mig_host(used_on_first):
    """A host of two MIG GPUs of 7 1g.10gb instances, ``used_on_first`` in use on the first."""
    from tests.topology_fakes import make_topology

    mig = [[("1g.10gb", i < used_on_first) for i in range(7)], [("1g.10gb", False)] * 7]
    topology = make_topology([cell(0), cell(1, socket=1)],
                             [gpu("0000:3b:00.0", 0, mig=mig[0]),
                              gpu("0000:af:00.0", 1, mig=mig[1])])
    return replace(host("m", inventories={"VCPU": inventory(32), "MEMORY_MB": inventory(131072),
                                          "VGPU": inventory(14)}), topology=topology)


def test_fragmentation_of_mig_keeps_whole_gpus_for_repartitioning():
    one = gpu_request(gpus=0, vgpus=1, pinned=False, numa_nodes=0)
    one = replace(one, device_requests=(replace(one.device_requests[0], mig_profile="1g.10gb"),))
    plugin = make(GpuFragmentationWeigher, **NO_FEED)
    # slices 1/2/3/4/7 at .4/.2/.2/.1/.1. A whole free GPU serves all; once one instance is
    # used only the 1-slice share (.4) of its free slices is useful.
    partly = weigh(plugin, mig_host(3), one)    # 4 -> 3 free 1g on GPU 0
    whole = weigh(plugin, mig_host(0), one)     # breaks GPU 0
    assert math.isclose(partly, (4 / 7 * 0.6 - 3 / 7 * 0.6) / (1 / 7))
    assert math.isclose(whole, -(6 / 7 * 0.6) / (1 / 7))
    assert partly > whole
    static = make(GpuFragmentationWeigher, mig_repartition=False, **NO_FEED)
    assert math.isclose(weigh(static, mig_host(3), one), weigh(static, mig_host(0), one))


def test_fragmentation_counts_only_gpus_their_node_can_feed():
    from cortex.rules.fragmentation import Feed, fed_per_cell

    topology = board_topology("hgx-h100-8gpu", pinned={0: 95})   # node 0: 5 CPUs left
    gpus = gpu_map(topology)
    fed = fed_per_cell(topology, gpus, gpus.mask(HGX), Feed(8.0, 0.0), True, 1.0)
    assert fed == gpus.mask(HGX[4:])                              # node 0's GPUs starve
    assert fed_per_cell(topology, gpus, gpus.mask(HGX), Feed(4.0, 0.0), True, 1.0) == \
        gpus.mask(HGX[:1] + HGX[4:])
    state = gpu_host(pinned={0: 95})
    one = gpu_request(gpus=1, vcpus=8)                            # lands on node 1
    # node 0's 4 GPUs are fragments before and after; node 1: 4 - 3.2 -> 3 - 1.8
    assert math.isclose(weigh(GpuFragmentationWeigher(), state, one), -0.4)
    assert math.isclose(weigh(make(GpuFragmentationWeigher, **NO_FEED), state, one), -2.0)
    own = make(GpuFragmentationWeigher, cpus_per_gpu=None, memory_mb_per_gpu=None)
    assert own.model.feed(gpu_request(gpus=2, vcpus=12, memory_mb=8192), 2.0) == Feed(6.0, 4096.0)


def test_fragmentation_penalises_a_request_that_eats_the_cpus_of_free_gpus():
    # 96 pinned vCPUs for one GPU on a free HGX node: the node's 100 CPUs fed 4 GPUs at 8
    # a GPU; after, 4 CPUs feed none of its 3 free GPUs.
    greedy = gpu_request(gpus=1, vcpus=96)
    modest = gpu_request(gpus=1, vcpus=8)
    plugin = make(GpuFragmentationWeigher, cpus_per_gpu=8.0, memory_mb_per_gpu=0.0)
    state = gpu_host(in_use=HGX[:4])
    assert math.isclose(weigh(plugin, state, modest), -0.4)
    assert math.isclose(weigh(plugin, state, greedy), -(3 - 0.8))


# -- weigher_numa_locality -----------------------------------------------------------------

@pytest.mark.parametrize("usage, request_args, options, expected", [
    ({}, {"gpus": 1}, {}, 1.0),
    # the guest fits cell 1 only; preferred takes node 0's GPU, where 2 CPUs are free
    ({"in_use": HGX[4:], "pinned": {0: 98}}, {"gpus": 1, "policy": "preferred"}, {},
     (2 / 8 + 1.0) / 2),
    ({}, {"gpus": 1, "vcpus": 64, "memory_mb": 786432}, {"headroom": 2.0},
     (100 / 128 + 1048576 / (786432 * 2)) / 2),
])
def test_numa_locality(usage, request_args, options, expected):
    state = gpu_host(**usage)
    assert math.isclose(weigh(make(NumaLocalityWeigher, **options), state,
                              gpu_request(**request_args)), expected)


# -- weigher_gpu_load ----------------------------------------------------------------------

@pytest.mark.parametrize("features, options, expected", [
    ({"gpu.utilization": 0.5, "gpu.framebuffer_used_bytes": 30.0,
      "gpu.framebuffer_free_bytes": 70.0, "gpu.temperature_celsius": 72.5}, {},
     -(0.5 + 0.3 + 0.5 * 0.5) / 2.5),
    ({"gpu.utilization": 0.5}, {}, -0.5),
    ({"gpu.utilization": 1.7}, {}, -1.0),                         # clamped
    ({"gpu.utilization.window_mean": 0.2, "gpu.utilization": 0.9},
     {"utilization_feature": "gpu.utilization.window_mean"}, -0.2),
    ({"gpu.temperature_celsius": 95.0}, {"utilization_weight": 0.0}, -1.0),
    ({}, {}, 0.0),
])
def test_gpu_load(features, options, expected):
    state = gpu_host(features=features)
    value = weigh(make(GpuLoadWeigher, **options), state, gpu_request(gpus=0, vgpus=1))
    assert math.isclose(value, expected)


def test_gpu_load_runs_for_vgpu_requests_unless_told():
    assert GpuLoadWeigher().applies(gpu_request(gpus=0, vgpus=1))
    assert not GpuLoadWeigher().applies(gpu_request())
    assert make(GpuLoadWeigher, requests="gpu").applies(gpu_request())


# -- weigher_gpu_energy --------------------------------------------------------------------

def busy_hgx(name="busy", az="az-1", temperature=None):
    features = {"gpu.power_watts": 2 * 600.0 + 6 * 70.0}
    if temperature is not None:
        features["gpu.temperature_celsius"] = temperature
    return gpu_host(name, az=az, in_use=HGX[:2], features=features)


@pytest.mark.parametrize("hosts, options, expected", [
    # alone in the view: idle draw from the option (60 W); (1620 - 6 * 60) / 2 = 630 W busy
    ([busy_hgx(temperature=80.0)], {}, -(630 - 60) * 400 * 1.4 / 1000 / 200),
    ([busy_hgx(az="az-2")], {"carbon_intensity": {"az-2": 50.0}}, -(630 - 60) * 50 / 1e3 / 200),
    # an idle host of the model in the view: idle 70 W; busy (1620 - 6 * 70) / 2 = 600 W
    ([busy_hgx(), gpu_host("idle", features={"gpu.power_watts": 560.0})], {},
     -(600 - 70) * 400 / 1000 / 200),
])
def test_gpu_energy_of_a_busy_host(hosts, options, expected):
    state = hosts[0]
    value = weigh(make(GpuEnergyWeigher, **options), state, gpu_request(), view(*hosts))
    assert math.isclose(value, expected)


def test_gpu_energy_of_an_idle_host_uses_its_models_busy_draw():
    idle = gpu_host("idle", features={"gpu.power_watts": 560.0})
    both = view(busy_hgx(), idle)
    assert math.isclose(weigh(GpuEnergyWeigher(), idle, gpu_request(), both),
                        -(600 - 70) * 400 / 1000 / 200)
    woken = make(GpuEnergyWeigher, idle_host_watts=100.0)
    assert math.isclose(weigh(woken, idle, gpu_request(), both),
                        -(600 - 70 + 100) * 400 / 1000 / 200)
    # nothing known: default busy minus idle watts
    assert math.isclose(weigh(GpuEnergyWeigher(), gpu_host(), gpu_request()),
                        -(300 - 60) * 400 / 1000 / 200)


def test_gpu_energy_prefers_the_greener_zone():
    options = {"carbon_intensity": {"az-1": 400.0, "az-2": 30.0}}
    green = weigh(make(GpuEnergyWeigher, **options), busy_hgx(az="az-2"), gpu_request())
    grey = weigh(make(GpuEnergyWeigher, **options), busy_hgx(az="az-1"), gpu_request())
    assert green > grey


# -- weigher_pci ---------------------------------------------------------------------------

@pytest.mark.parametrize("in_use, expected", [((), -1.0), (HGX[:3], -5 / 8), (HGX, 0.0)])
def test_pci_weigher_stacks_by_free_devices(in_use, expected):
    assert weigh(PCIWeigher(), gpu_host(in_use=in_use), gpu_request()) == expected
    assert weigh(PCIWeigher(), host("plain"), gpu_request()) == 0.0



def test_fragmentation_measures_against_the_recorded_sizes_once_enough():
    one = gpu_request(gpus=1)
    state = gpu_host()
    learned = make(GpuFragmentationWeigher, sizes_from="demand", min_learned=10)
    only_ones = replace(view(state), gpu_request_sizes={1: 40})
    # only 1-GPU requests recorded: every free GPU serves one, a 1-GPU claim strands none
    assert weigh(learned, state, one, only_ones) == 0.0
    assert weigh(GpuFragmentationWeigher(), state, one, only_ones) == -2.0, "options' sizes"
    few = replace(view(state), gpu_request_sizes={1: 9})
    assert weigh(learned, state, one, few) == -2.0, "below min_learned: the options' sizes"
    eights = replace(view(state), gpu_request_sizes={8: 30, 1: 10})
    bound = learned.bind(one, eights)
    assert bound.model.sizes == ((1, 0.25), (8, 0.75)) and bound is learned.bind(one, eights)
    # after two distributions the shared answers did not mix: the first is asked again
    assert weigh(learned, state, one, only_ones) == 0.0
    with pytest.raises(OptionsError, match="sizes_from"):
        make(GpuFragmentationWeigher, sizes_from="trace")

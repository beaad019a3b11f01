"""weigher_gpu_fragmentation: the GPU capacity a placement strands."""

import math
from dataclasses import replace

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.gpu_fragmentation import GpuFragmentationWeigher
from cortex.rules.gpu_sets import gpu_map
from tests.fakes import host, inventory, view
from tests.gpu_fakes import A100, board_topology, gpu_host, gpu_request, weigh
from tests.topology_fakes import cell, gpu
from tests.unit.gpu_boards import A100S, FLOATING, HGX
from tests.unit.plugins.weighers.weighing import make

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


@pytest.mark.parametrize("options, message", [
    ({"request_sizes": {"one": 1.0}}, "counts"),
    ({"vgpu_sizes": {"1": 0.0}}, "not all 0"),
    ({"min_link": "pcie"}, "min_link"),
    ({"scale": 0.0}, "scale"),
])
def test_options_are_validated(options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(GpuFragmentationWeigher, options)


def test_shared_useful_is_the_sum_over_sizes_bit_for_bit():
    """The GPUs serving a size are summed once per step of ``largest``: the very same floats.

    The rule read directly: per size, the fed share of every GPU whose largest request
    served is at least that size, weighted by the size's probability. Exact equality, as
    the weigher's ties (and so the simulator's placements) turn on the last bit.
    """
    import random

    from cortex.rules.fragmentation import SharedGpu, parse_sizes, shared_useful

    rng = random.Random(7)
    for _ in range(300):
        slots = rng.choice([4, 10, 100])
        gpus = []
        for _ in range(rng.randrange(0, 9)):
            free = rng.randrange(0, slots + 1)
            gpu = SharedGpu(free, slots, rng.choice([free, slots, rng.randrange(0, free + 1)]))
            gpus.append(gpu.capped(rng.randrange(0, free + 1)) if rng.random() < 0.3 else gpu)
        sizes = parse_sizes({str(rng.randrange(1, slots + 1)): rng.random() + 0.01
                             for _ in range(rng.randrange(1, 40))}, "vgpu_sizes")
        direct = sum(p * sum((g.free if g.usable is None else g.usable) / g.total
                             for g in gpus if g.largest >= s) for s, p in sizes)
        assert shared_useful(gpus, sizes) == direct

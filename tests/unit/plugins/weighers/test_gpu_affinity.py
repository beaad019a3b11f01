"""weigher_gpu_affinity: the quality of the GPU set the request gets on the host."""

import math

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.gpu_affinity import GpuAffinityWeigher
from tests.fakes import host
from tests.gpu_fakes import A100, L40S, gpu_host, gpu_request, weigh
from tests.unit.gpu_boards import A100S, FLOATING, HGX
from tests.unit.plugins.weighers.weighing import make


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


@pytest.mark.parametrize("options, message", [
    ({"pair_scores": {"nvswitch": 0.9}}, "unknown level"),
    ({"pair_scores": {"nvlink": 1.5}}, r"\[0, 1\]"),
    ({"set_quality": "median"}, "set_quality"),
    ({"devices": "all"}, "devices"),
])
def test_options_are_validated(options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(GpuAffinityWeigher, options)

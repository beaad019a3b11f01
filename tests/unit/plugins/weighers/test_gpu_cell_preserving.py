"""weigher_gpu_cell_preserving: HiveD's cells on the agent's link map, board by board."""

import math

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.gpu_cell_preserving import GpuCellPreservingWeigher
from tests.gpu_fakes import A100, L40S, gpu_host, gpu_request, weigh

HGX = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
       "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
A100S = ("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0")
FLOATING = {"pinned": False, "numa_nodes": 0}


def make(**options):
    return GpuCellPreservingWeigher(build_options(GpuCellPreservingWeigher, options))


@pytest.mark.parametrize("board, in_use, request_args, expected", [
    ("hgx-h100-8gpu", (), {"gpus": 2}, 2 / 8),            # splits a free 8-GPU board
    ("hgx-h100-8gpu", (), {"gpus": 8, **FLOATING}, 1.0),  # takes the board whole
    ("hgx-h100-8gpu", HGX[:6], {"gpus": 2}, 1.0),         # fills the last free pair
    ("hgx-h100-8gpu", HGX[:4], {"gpus": 1}, 1 / 4),
    ("a100-pcie-4gpu-nvlink-pairs", (), {"gpus": 2, "products": (A100,)}, 1.0),  # a bridge pair
    ("a100-pcie-4gpu-nvlink-pairs", (), {"gpus": 1, "products": (A100,)}, 1 / 2),
    ("l40s-4gpu-pcie", (), {"gpus": 1, "products": (L40S,)}, 1.0),   # no NVLink: cells of one
    ("l40s-4gpu-pcie", (), {"gpus": 2, "products": (L40S,)}, 0.0),   # spans cells
])
def test_the_claim_against_the_free_cell_it_comes_from(board, in_use, request_args, expected):
    state = gpu_host(board=board, in_use=in_use)
    assert math.isclose(weigh(make(), state, gpu_request(**request_args)), expected)


def test_a_pair_elsewhere_beats_breaking_a_whole_board():
    """The rule across hosts: the smallest free cell that holds the request wins."""
    weigher = make()
    request = gpu_request(gpus=2)
    whole = weigh(weigher, gpu_host("whole"), request)
    pair = weigh(weigher, gpu_host("pair", in_use=HGX[:6]), request)
    four = weigh(weigher, gpu_host("four", in_use=HGX[:4]), request)
    assert pair > four > whole


def test_a_coarser_level_makes_pcie_neighbours_one_cell():
    state = gpu_host(board="l40s-4gpu-pcie")
    request = gpu_request(gpus=2, products=(L40S,))
    assert weigh(make(level="cross_socket"), state, request) == 2 / 4


def test_hosts_without_gpus_or_requests_without_them():
    assert weigh(make(), gpu_host(board="hgx-h100-8gpu", in_use=HGX), gpu_request(gpus=2)) == 0
    assert not make().applies(gpu_request(gpus=0, vgpus=1))


@pytest.mark.parametrize("options", [{"level": "same_gpu"}, {"level": "nvswitch"}])
def test_options_outside_the_levels_are_refused(options):
    with pytest.raises(OptionsError):
        build_options(GpuCellPreservingWeigher, options)

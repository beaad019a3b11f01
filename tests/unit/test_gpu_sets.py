"""cortex.rules.gpu_sets, table by table: pair levels, best sets, usefulness, GPU maps."""

import math
from dataclasses import replace

import pytest

from cortex.knowledge.topology import topology_from_report
from cortex.rules.gpu_sets import GpuMap, gpu_map, vgpu_usefulness
from tests.gpu_fakes import board_topology
from tests.topology_fakes import cell, gpu
from tests.unit.gpu_boards import A100S, HGX

SIZES = ((1, 0.4), (2, 0.2), (4, 0.2), (8, 0.2))


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



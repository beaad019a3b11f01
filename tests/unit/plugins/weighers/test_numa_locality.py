"""weigher_numa_locality: room on the NUMA nodes of the request's GPUs."""

import math

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.numa_locality import NumaLocalityWeigher
from tests.gpu_fakes import gpu_host, gpu_request, weigh
from tests.unit.gpu_boards import HGX
from tests.unit.plugins.weighers.weighing import make


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


@pytest.mark.parametrize("options, message", [
    ({"headroom": 0.5}, "headroom"),
])
def test_options_are_validated(options, message):
    with pytest.raises(OptionsError, match=message):
        build_options(NumaLocalityWeigher, options)

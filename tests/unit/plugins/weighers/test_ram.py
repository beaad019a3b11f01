"""weigher_ram: the free share of MEMORY_MB after placement."""

import math

import pytest

from cortex.plugins.weighers.ram import RAMWeigher
from tests.fakes import host, inventory, nova
from tests.unit.plugins.weighers.weighing import FLAVOR, weight


@pytest.mark.parametrize("inventories, expected", [
    ({"MEMORY_MB": inventory(16384)}, (16384 - 8192) / 16384),
    ({"MEMORY_MB": inventory(16384, used=8192, reserved=4096)}, (12288 - 8192 - 8192) / 12288),
    ({}, 0.0),
])
def test_free_share(inventories, expected):
    state = host("h", inventories=inventories)
    assert math.isclose(weight(RAMWeigher(), state, nova(flavor=FLAVOR)), expected)


def test_free_share_spreads_and_stacks_by_sign():
    request = nova(flavor=FLAVOR)
    empty = host("a", inventories={"MEMORY_MB": inventory(65536)})
    busy = host("b", inventories={"MEMORY_MB": inventory(65536, used=49152)})
    assert weight(RAMWeigher(), empty, request) > weight(RAMWeigher(), busy, request)


def test_free_share_takes_the_best_named_node():
    state = host("vc", nodes={"a": {"MEMORY_MB": inventory(16384, used=16384)},
                              "b": {"MEMORY_MB": inventory(16384)}})
    assert weight(RAMWeigher(), state, nova(flavor=FLAVOR), nodes=("a", "b")) == 0.5
    assert weight(RAMWeigher(), state, nova(flavor=FLAVOR), nodes=("a",)) == -0.5

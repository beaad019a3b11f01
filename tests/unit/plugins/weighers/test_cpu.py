"""weigher_cpu: the free share of the requested CPU class after placement."""

import math

import pytest

from cortex.plugins.weighers.cpu import CPUWeigher
from tests.fakes import host, inventory, nova
from tests.unit.plugins.weighers.weighing import FLAVOR, weight


@pytest.mark.parametrize("inventories, expected", [
    # VCPU capacity counts the allocation ratio: 8 * 4.0 = 32
    ({"VCPU": inventory(8, used=12, ratio=4.0)}, (32 - 12 - 4) / 32),
])
def test_free_share(inventories, expected):
    state = host("h", inventories=inventories)
    assert math.isclose(weight(CPUWeigher(), state, nova(flavor=FLAVOR)), expected)


def test_cpu_weigher_weighs_pcpu_for_pinned_requests():
    state = host("h", inventories={"VCPU": inventory(16), "PCPU": inventory(100, used=50)})
    pinned = nova(flavor=FLAVOR | {"extra_specs": {"hw:cpu_policy": "dedicated"}})
    assert math.isclose(weight(CPUWeigher(), state, pinned), (100 - 50 - 4) / 100)

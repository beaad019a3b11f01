"""weigher_disk: the free share of DISK_GB after placement."""

import math

import pytest

from cortex.plugins.weighers.disk import DiskWeigher
from tests.fakes import host, inventory, nova
from tests.unit.plugins.weighers.weighing import FLAVOR, weight


@pytest.mark.parametrize("inventories, expected", [
    ({"DISK_GB": inventory(1000, used=120)}, (1000 - 120 - 80) / 1000),
    ({"DISK_GB": inventory(100, used=100)}, -0.8),      # overcommitted
])
def test_free_share(inventories, expected):
    state = host("h", inventories=inventories)
    assert math.isclose(weight(DiskWeigher(), state, nova(flavor=FLAVOR)), expected)

"""weigher_pool_allocated_capacity: the pool's allocated capacity."""

import pytest

from cortex.plugins.weighers.pool_allocated_capacity import PoolAllocatedCapacityWeigher
from tests.fakes import pool
from tests.unit.plugins.storage import typed


@pytest.mark.parametrize("state, expected", [
    (pool("p", total=1000, allocated=250), 0.25),
    (pool("p", total=1000, allocated=3000), 3.0),
    (pool("p", total=0, allocated=10), 0.0),
])
def test_pool_allocated_capacity(state, expected):
    assert PoolAllocatedCapacityWeigher().weigh(state, typed("cinder", {}), None) == expected

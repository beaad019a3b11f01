"""weigher_pool_free_capacity: the pool's free share after placement."""

import math

import pytest

from cortex.plugins.base import build_options
from cortex.plugins.weighers.pool_free_capacity import PoolFreeCapacityWeigher
from tests.fakes import pool, storage
from tests.unit.plugins.storage import typed


@pytest.mark.parametrize("state, specs, size, thin_aware, expected", [
    # thick: (free - reserved - size) / total
    (pool("p", total=1000, free=600, reserved=10), {"provisioning:type": "thick"}, 100, True,
     (600 - 100 - 100) / 1000),
    # thin: (total * ratio - provisioned - reserved - size) / (total * ratio)
    (pool("p", total=1000, free=600, provisioned=1500, ratio=2.0, thin=True), {}, 100, True,
     (2000 - 1500 - 100) / 2000),
    (pool("p", total=1000, free=600, provisioned=1500, ratio=2.0, thin=True), {}, 100, False,
     (600 - 100) / 1000),
    # thin asked but the pool cannot: thick rule
    (pool("p", total=1000, free=600, provisioned=1500, ratio=2.0), {}, 100, True,
     (600 - 100) / 1000),
    (pool("p", total=0, free=0), {}, 100, True, 0.0),
])
def test_pool_free_capacity(state, specs, size, thin_aware, expected):
    plugin = PoolFreeCapacityWeigher(build_options(PoolFreeCapacityWeigher,
                                                   {"thin_aware": thin_aware}))
    weight = plugin.weigh(state, typed("cinder", specs, size), None)
    assert math.isclose(weight, expected)


def test_pool_free_capacity_prefers_the_emptier_thin_pool():
    request = storage("cinder", "create-volume-thin-qos")
    roomy = pool("a", total=1000, free=100, provisioned=1000, ratio=4.0, thin=True)
    tight = pool("b", total=1000, free=500, provisioned=3500, ratio=4.0, thin=True)
    assert PoolFreeCapacityWeigher().weigh(roomy, request, None) > \
        PoolFreeCapacityWeigher().weigh(tight, request, None)

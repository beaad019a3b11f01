"""weigher_volume_count: volumes on the pool, scaled."""

from cortex.plugins.base import build_options
from cortex.plugins.weighers.volume_count import VolumeCountWeigher
from tests.fakes import pool
from tests.unit.plugins.storage import typed


def test_volume_count():
    plugin = VolumeCountWeigher(build_options(VolumeCountWeigher, {"scale": 100}))
    assert plugin.weigh(pool("p", count=250), typed("cinder", {}), None) == 2.5
    assert plugin.weigh(pool("p"), typed("cinder", {}), None) == 0.0

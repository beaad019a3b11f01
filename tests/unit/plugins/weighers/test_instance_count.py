"""weigher_instance_count: instances on the host, scaled."""

import pytest

from cortex.plugins.base import OptionsError
from cortex.plugins.weighers.instance_count import InstanceCountWeigher
from tests.fakes import host, instance, nova
from tests.unit.plugins.weighers.weighing import make, weight


def test_instance_count():
    plugin = make(InstanceCountWeigher, scale=10.0)
    state = host("h", instances=[instance(str(i)) for i in range(5)])
    assert weight(plugin, state, nova()) == 0.5
    with pytest.raises(OptionsError):
        make(InstanceCountWeigher, scale=0.0)

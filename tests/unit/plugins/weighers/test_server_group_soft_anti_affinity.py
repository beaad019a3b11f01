"""weigher_server_group_soft_anti_affinity: minus the group's members on the host."""

import pytest

from cortex.plugins.weighers.server_group_soft_anti_affinity import (
    ServerGroupSoftAntiAffinityWeigher,
)
from tests.fakes import host, instance
from tests.unit.plugins.weighers.weighing import grouped, weight


@pytest.mark.parametrize("on_host, group_hosts, expected", [
    (("m1",), (), -1.0),
    ((), (), 0.0),
])
def test_soft_anti_affinity(on_host, group_hosts, expected):
    state = host("h", instances=[instance(u) for u in on_host])
    request = grouped("soft-anti-affinity", members=("m1", "m2"), hosts=group_hosts)
    assert ServerGroupSoftAntiAffinityWeigher().applies(request)
    assert weight(ServerGroupSoftAntiAffinityWeigher(), state, request) == expected

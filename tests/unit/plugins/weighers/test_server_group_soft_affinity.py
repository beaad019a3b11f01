"""weigher_server_group_soft_affinity: the group's members on the host."""

import pytest

from cortex.plugins.weighers.server_group_soft_affinity import ServerGroupSoftAffinityWeigher
from cortex.plugins.weighers.server_group_soft_anti_affinity import (
    ServerGroupSoftAntiAffinityWeigher,
)
from tests.fakes import host, instance, nova
from tests.unit.plugins.weighers.weighing import grouped, weight


@pytest.mark.parametrize("on_host, group_hosts, expected", [
    (("m1", "m2", "x"), (), 2.0),
    ((), ("h",), 1.0),
    (("x",), (), 0.0),
])
def test_soft_affinity(on_host, group_hosts, expected):
    state = host("h", instances=[instance(u) for u in on_host])
    request = grouped("soft-affinity", members=("m1", "m2"), hosts=group_hosts)
    assert ServerGroupSoftAffinityWeigher().applies(request)
    assert weight(ServerGroupSoftAffinityWeigher(), state, request) == expected


def test_soft_affinity_weighers_skip_other_policies():
    assert not ServerGroupSoftAffinityWeigher().applies(grouped("soft-anti-affinity"))
    assert not ServerGroupSoftAntiAffinityWeigher().applies(grouped("anti-affinity"))
    assert not ServerGroupSoftAffinityWeigher().applies(nova())

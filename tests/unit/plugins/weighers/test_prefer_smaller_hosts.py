"""weigher_prefer_smaller_hosts: one minus the capacity relative to the largest host."""

import pytest

from cortex.plugins.base import OptionsError
from cortex.plugins.weighers.prefer_smaller_hosts import PreferSmallerHostsWeigher
from tests.fakes import host, inventory, nova, view
from tests.unit.plugins.weighers.weighing import FLAVOR, make, weight


def test_prefer_smaller_hosts():
    small = host("cmp0001", inventories={"MEMORY_MB": inventory(262144)})
    big = host("cmp0002", inventories={"MEMORY_MB": inventory(1048576)})
    other = host("cmp0003", inventories={"MEMORY_MB": inventory(524288)})
    request = nova(hosts=["cmp0001", "cmp0002", "cmp0003"], flavor=FLAVOR)
    plugin = make(PreferSmallerHostsWeigher, resource_weights={"MEMORY_MB": 1.0})
    knowledge = view(small, big, other)
    assert weight(plugin, small, request, knowledge) == 0.75
    assert weight(plugin, other, request, knowledge) == 0.5
    assert weight(plugin, big, request, knowledge) == 0.0


def test_prefer_smaller_hosts_rejects_bad_weights():
    with pytest.raises(OptionsError):
        make(PreferSmallerHostsWeigher, resource_weights={"MEMORY_MB": -1.0})

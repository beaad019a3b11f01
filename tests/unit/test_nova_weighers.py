"""Nova weighers, table by table: a host, a request and the raw weight expected."""

import math

import pytest

from cortex.plugins.base import OptionsError, build_options
from cortex.plugins.weighers.build_failures import BuildFailureWeigher
from cortex.plugins.weighers.contention import ContentionWeigher
from cortex.plugins.weighers.cpu import CPUWeigher
from cortex.plugins.weighers.disk import DiskWeigher
from cortex.plugins.weighers.instance_count import InstanceCountWeigher
from cortex.plugins.weighers.io_ops import IoOpsWeigher
from cortex.plugins.weighers.live_migration_locality import LiveMigrationLocalityWeigher
from cortex.plugins.weighers.metrics import MetricsWeigher, MetricUnavailable
from cortex.plugins.weighers.noisy_projects import NoisyProjectsWeigher
from cortex.plugins.weighers.prefer_smaller_hosts import PreferSmallerHostsWeigher
from cortex.plugins.weighers.ram import RAMWeigher
from cortex.plugins.weighers.server_group_soft_affinity import ServerGroupSoftAffinityWeigher
from cortex.plugins.weighers.server_group_soft_anti_affinity import (
    ServerGroupSoftAntiAffinityWeigher,
)
from cortex.request.base import Candidate
from tests.fakes import aggregate, host, instance, inventory, nova, view

FLAVOR = {"vcpus": 4, "memory_mb": 8192, "root_gb": 80, "extra_specs": {}}


def weight(plugin, state, request, knowledge=None, nodes=()):
    bound = plugin.bind(request, knowledge or view(state))
    return bound.weigh(state, request, Candidate(state.host, nodes, 0.0))


def make(cls, **options):
    return cls(build_options(cls, options))


# -- RAM, CPU, disk: free share after placement -------------------------------------------

@pytest.mark.parametrize("cls, inventories, expected", [
    (RAMWeigher, {"MEMORY_MB": inventory(16384)}, (16384 - 8192) / 16384),
    (RAMWeigher, {"MEMORY_MB": inventory(16384, used=8192, reserved=4096)},
     (12288 - 8192 - 8192) / 12288),
    (RAMWeigher, {}, 0.0),
    # VCPU capacity counts the allocation ratio: 8 * 4.0 = 32
    (CPUWeigher, {"VCPU": inventory(8, used=12, ratio=4.0)}, (32 - 12 - 4) / 32),
    (DiskWeigher, {"DISK_GB": inventory(1000, used=120)}, (1000 - 120 - 80) / 1000),
    (DiskWeigher, {"DISK_GB": inventory(100, used=100)}, -0.8),      # overcommitted
])
def test_free_share_weighers(cls, inventories, expected):
    state = host("h", inventories=inventories)
    assert math.isclose(weight(cls(), state, nova(flavor=FLAVOR)), expected)


def test_cpu_weigher_weighs_pcpu_for_pinned_requests():
    state = host("h", inventories={"VCPU": inventory(16), "PCPU": inventory(100, used=50)})
    pinned = nova(flavor=FLAVOR | {"extra_specs": {"hw:cpu_policy": "dedicated"}})
    assert math.isclose(weight(CPUWeigher(), state, pinned), (100 - 50 - 4) / 100)


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


# -- prefer smaller hosts -----------------------------------------------------------------

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


# -- I/O ops, instance count --------------------------------------------------------------

@pytest.mark.parametrize("instances, expected", [
    ((), 0.0),
    ((instance("a"), instance("b", task_state="image_snapshot")), 0.25),
    ((instance("a", vm_state="building"), instance("b", task_state="resize_migrating"),
      instance("c", task_state="rebuilding"), instance("d", task_state="powering-off")), 0.75),
])
def test_io_ops(instances, expected):
    assert weight(IoOpsWeigher(), host("h", instances=instances), nova()) == expected


def test_instance_count():
    plugin = make(InstanceCountWeigher, scale=10.0)
    state = host("h", instances=[instance(str(i)) for i in range(5)])
    assert weight(plugin, state, nova()) == 0.5
    with pytest.raises(OptionsError):
        make(InstanceCountWeigher, scale=0.0)


# -- soft affinity / anti-affinity --------------------------------------------------------

def grouped(policy, members=(), hosts=()):
    return nova(spec={"instance_group": {"uuid": "g", "policy": policy,
                                         "members": list(members), "hosts": list(hosts)}})


@pytest.mark.parametrize("cls, policy, on_host, group_hosts, expected", [
    (ServerGroupSoftAffinityWeigher, "soft-affinity", ("m1", "m2", "x"), (), 2.0),
    (ServerGroupSoftAffinityWeigher, "soft-affinity", (), ("h",), 1.0),
    (ServerGroupSoftAffinityWeigher, "soft-affinity", ("x",), (), 0.0),
    (ServerGroupSoftAntiAffinityWeigher, "soft-anti-affinity", ("m1",), (), -1.0),
    (ServerGroupSoftAntiAffinityWeigher, "soft-anti-affinity", (), (), 0.0),
])
def test_soft_affinity(cls, policy, on_host, group_hosts, expected):
    state = host("h", instances=[instance(u) for u in on_host])
    request = grouped(policy, members=("m1", "m2"), hosts=group_hosts)
    assert cls().applies(request)
    assert weight(cls(), state, request) == expected


def test_soft_affinity_weighers_skip_other_policies():
    assert not ServerGroupSoftAffinityWeigher().applies(grouped("soft-anti-affinity"))
    assert not ServerGroupSoftAntiAffinityWeigher().applies(grouped("anti-affinity"))
    assert not ServerGroupSoftAffinityWeigher().applies(nova())


# -- build failures, metrics, contention, noisy projects ----------------------------------

def test_build_failures():
    assert weight(BuildFailureWeigher(), host("h", failed_builds=3), nova()) == -3.0
    assert weight(BuildFailureWeigher(), host("h"), nova()) == 0.0


@pytest.mark.parametrize("features, options, expected", [
    ({"cpu.busy": 0.25}, {"metrics": {"cpu.busy": -1.0}}, -0.25),
    ({"cpu.busy": 0.5, "memory.active": 0.5},
     {"metrics": {"cpu.busy": -1.0, "memory.active": -0.5}}, -0.75),
    ({}, {"metrics": {"cpu.busy": -1.0}}, -1.0),                 # weight_of_unavailable
    ({}, {"metrics": {"cpu.busy": -1.0}, "weight_of_unavailable": 0.0}, 0.0),
])
def test_metrics(features, options, expected):
    state = host("h", features=features)
    assert weight(make(MetricsWeigher, **options), state, nova()) == expected


def test_metrics_required_raises_and_empty_does_not_run():
    plugin = make(MetricsWeigher, metrics={"cpu.busy": 1.0}, required=True)
    with pytest.raises(MetricUnavailable):
        weight(plugin, host("h"), nova())
    assert not MetricsWeigher().applies(nova())


@pytest.mark.parametrize("steal, expected", [
    (None, 0.0), (0.01, 0.0), (0.06, -0.5), (0.1, -1.0), (0.5, -1.0),
])
def test_contention(steal, expected):
    features = {} if steal is None else {"cpu.steal": steal}
    plugin = make(ContentionWeigher, lower_bound=0.02, upper_bound=0.1)
    assert math.isclose(weight(plugin, host("h", features=features), nova()), expected)


def test_contention_reads_the_named_feature():
    plugin = make(ContentionWeigher, feature="cpu.contention", lower_bound=0.0, upper_bound=1.0)
    state = host("h", features={"cpu.contention": 0.3, "cpu.steal": 0.9})
    assert weight(plugin, state, nova()) == -0.3


@pytest.mark.parametrize("instances, expected", [
    ((), 0.0),
    ((instance("a", "other", busy=1.0),), 0.0),                      # another project
    ((instance("a", "me", busy=0.3),), 0.0),                         # quiet
    ((instance("a", "me", busy=0.9), instance("b", "me", busy=0.5)), -0.5),
    ((instance("a", "me", busy=1.0),), -1.0),
])
def test_noisy_projects(instances, expected):
    state = host("h", instances=instances)
    plugin = make(NoisyProjectsWeigher, lower_bound=0.5, upper_bound=0.9)
    assert math.isclose(weight(plugin, state, nova(spec={"project_id": "me"})), expected)


# -- live-migration locality --------------------------------------------------------------

AZ = aggregate("az", az="az-1")
RACK, GPU = aggregate("rack-1"), aggregate("gpu-a100")


def live(source="src"):
    return nova("cpu-live-migrate", spec={"scheduler_hints": {
        "_nova_check_type": ["live_migrate"], "source_host": [source]}})


@pytest.mark.parametrize("target_aggregates, expected", [
    ((AZ, RACK, GPU), 1.0),
    ((AZ, RACK), 0.5),
    ((AZ,), 0.0),                                    # the zone alone does not count
    ((), 0.0),
])
def test_live_migration_locality(target_aggregates, expected):
    source = host("src", aggregates=(AZ, RACK, GPU))
    target = host("t", aggregates=target_aggregates)
    plugin = LiveMigrationLocalityWeigher()
    assert plugin.applies(live())
    assert weight(plugin, target, live(), view(source, target)) == expected


def test_live_migration_locality_counting_zones_and_unknown_sources():
    source = host("src", aggregates=(AZ, RACK))
    target = host("t", aggregates=(AZ,))
    zones = make(LiveMigrationLocalityWeigher, ignore_zones=False)
    assert weight(zones, target, live(), view(source, target)) == 0.5
    assert weight(LiveMigrationLocalityWeigher(), target, live("gone"), view(target)) == 0.0
    assert not LiveMigrationLocalityWeigher().applies(nova())

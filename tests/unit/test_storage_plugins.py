"""Cinder and Manila filters and weighers, table by table (pools, types, expected outcome)."""

import logging
import math

import pytest

from cortex.plugins.base import build_options
from cortex.plugins.filters.backend_state import BackendStateFilter
from cortex.plugins.filters.capacity import CapacityFilter, wants_thin
from cortex.plugins.filters.pool_capabilities import PoolCapabilitiesFilter
from cortex.plugins.weighers.pool_allocated_capacity import PoolAllocatedCapacityWeigher
from cortex.plugins.weighers.pool_free_capacity import PoolFreeCapacityWeigher
from cortex.plugins.weighers.pool_utilization import PoolUtilizationWeigher
from cortex.plugins.weighers.volume_count import VolumeCountWeigher
from cortex.request import CinderRequest, ManilaRequest
from cortex.request.base import Candidate
from tests.fakes import pool, storage

NETAPP_HDD = {"volume_backend_name": "netapp-hdd", "multiattach": True,
              "storage_protocol": "NFS", "netapp_raid_type": "raid_dp", "QoS_support": True,
              "backend_state": "up", "pool_name": "aggr1", "netapp_disk_type": ["SAS", "SATA"]}
MANILA = {"share_backend_name": "netapp", "storage_protocol": "NFS_CIFS",
          "driver_handles_share_servers": True, "snapshot_support": True,
          "create_share_from_snapshot_support": True, "replication_type": "dr",
          "thin_provisioning": [True, False], "dedupe": False}


def typed(service, extra_specs, size=10):
    body = {"spec": {"volume_type" if service == "cinder" else "share_type":
                     {"extra_specs": extra_specs},
                     ("volume_properties" if service == "cinder" else "share_properties"):
                     {"size": size}},
            "context": {}, "hosts": [{"host": "p"}], "weights": {"p": 0.0}}
    return (CinderRequest if service == "cinder" else ManilaRequest).from_body(body)


def verdict(plugin, state, request):
    return plugin.check(state, request, Candidate(state.name, (), 0.0))


@pytest.mark.parametrize("specs, expected", [
    ({}, None),
    ({"volume_backend_name": "netapp-hdd"}, None),
    ({"capabilities:volume_backend_name": "netapp-hdd"}, None),
    ({"capabilities:volume_backend_name": "netapp-ssd"},
     "volume_backend_name=netapp-hdd does not meet capabilities:volume_backend_name=netapp-ssd"),
    ({"multiattach": "<is> True"}, None),
    ({"QoS_support": "<is> False"},
     "QoS_support=True does not meet QoS_support=<is> False"),
    # the pool's capacity fields are capabilities too (Cinder's pool state holds them)
    ({"thin_provisioning_support": "<is> True"}, None),
    ({"thick_provisioning_support": "<is> True"},
     "thick_provisioning_support=False does not meet thick_provisioning_support=<is> True"),
    ({"max_over_subscription_ratio": ">= 2"}, None),
    # list capabilities: any element
    ({"netapp_disk_type": "SATA"}, None),
    ({"netapp_disk_type": "SSD"}, "netapp_disk_type=SAS,SATA does not meet netapp_disk_type=SSD"),
    # scoped keys of other scopes are ignored
    ({"provisioning:type": "thin", "RESKEY:availability_zones": "eu-de-1a",
      "netapp:qos_policy_group": "gold"}, None),
    # an unscoped key the pool does not report fails it
    ({"replication_enabled": "<is> True"},
     "no capability replication_enabled for replication_enabled=<is> True"),
    ({"storage_protocol": "<in> NF"}, None),
    ({"storage_protocol": "<or> iSCSI <or> FC"},
     "storage_protocol=NFS does not meet storage_protocol=<or> iSCSI <or> FC"),
])
def test_cinder_capabilities(specs, expected):
    state = pool("p", thin=True, thick=False, ratio=4.0, capabilities=NETAPP_HDD)
    request = typed("cinder", specs)
    assert PoolCapabilitiesFilter().applies(request) is bool(specs)
    if specs:
        assert verdict(PoolCapabilitiesFilter(), state, request) == expected


@pytest.mark.parametrize("specs, expected", [
    ({"driver_handles_share_servers": "<is> True"}, None),
    ({"driver_handles_share_servers": "True"}, None),
    ({"driver_handles_share_servers": "<is> False"},
     "driver_handles_share_servers=True does not meet driver_handles_share_servers=<is> False"),
    ({"snapshot_support": "<is> True", "create_share_from_snapshot_support": "<is> True"},
     None),
    ({"revert_to_snapshot_support": "<is> True"},
     "no capability revert_to_snapshot_support for revert_to_snapshot_support=<is> True"),
    ({"storage_protocol": "<in> CIFS"}, None),
    ({"storage_protocol": "<in> GLUSTERFS"},
     "storage_protocol=NFS_CIFS does not meet storage_protocol=<in> GLUSTERFS"),
    ({"thin_provisioning": "<is> True"}, None),            # [True, False]: any element
    ({"dedupe": "<is> True"}, "dedupe=False does not meet dedupe=<is> True"),
    ({"share_backend_name": "netapp", "replication_type": "dr"}, None),
    # Manila leaves the type's availability_zones to the AZ filter
    ({"availability_zones": "eu-de-2", "capabilities:availability_zones": "eu-de-2"}, None),
    ({"netapp:hide_snapdir": "true"}, None),
])
def test_manila_share_type_capabilities(specs, expected):
    state = pool("p", thin=True, capabilities=MANILA)
    assert verdict(PoolCapabilitiesFilter(), state, typed("manila", specs)) == expected


@pytest.mark.parametrize("state, expected", [
    ("up", None), ("down", "backend_state is down"), ("DOWN", "backend_state is down"),
    (None, None),
])
def test_backend_state(state, expected):
    capabilities = {"backend_state": state} if state else {}
    assert verdict(BackendStateFilter(), pool("p", capabilities=capabilities),
                   typed("cinder", {})) == expected


@pytest.mark.parametrize("service, specs, thin", [
    ("cinder", {}, True),                                   # Cinder's default is thin
    ("cinder", {"provisioning:type": "thin"}, True),
    ("cinder", {"provisioning:type": "thick"}, False),
    ("manila", {}, True),                                   # Manila's use_thin_logic
    ("manila", {"thin_provisioning": "<is> True"}, True),
    ("manila", {"thin_provisioning": "True"}, True),
    ("manila", {"thin_provisioning": "<is> False"}, False),
    ("manila", {"capabilities:thin_provisioning": "<is> False"}, False),
])
def test_wants_thin(service, specs, thin):
    assert wants_thin(typed(service, specs)) is thin


def test_manila_capacity_thin_by_default():
    thin = pool("p", total=1000, free=100, provisioned=1000, ratio=2.0, thin=True)
    assert verdict(CapacityFilter(), thin, typed("manila", {}, size=150)) is None
    thick = typed("manila", {"thin_provisioning": "<is> False"}, size=150)
    assert verdict(CapacityFilter(), thin, thick) == "free 100 GiB < 150 GiB"


# -- weighers -----------------------------------------------------------------------------

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


@pytest.mark.parametrize("state, expected", [
    (pool("p", total=1000, allocated=250), 0.25),
    (pool("p", total=1000, allocated=3000), 3.0),
    (pool("p", total=0, allocated=10), 0.0),
])
def test_pool_allocated_capacity(state, expected):
    assert PoolAllocatedCapacityWeigher().weigh(state, typed("cinder", {}), None) == expected


def test_volume_count():
    plugin = VolumeCountWeigher(build_options(VolumeCountWeigher, {"scale": 100}))
    assert plugin.weigh(pool("p", count=250), typed("cinder", {}), None) == 2.5
    assert plugin.weigh(pool("p"), typed("cinder", {}), None) == 0.0


@pytest.mark.parametrize("features, expected", [
    ({}, 0.0), ({"pool.utilization": 0.3}, 0.0), ({"pool.utilization": 0.7}, -0.5),
    ({"pool.utilization": 0.9}, -1.0), ({"pool.utilization": 1.0}, -1.0),
])
def test_pool_utilization(features, expected):
    plugin = PoolUtilizationWeigher(build_options(
        PoolUtilizationWeigher, {"lower_bound": 0.5, "upper_bound": 0.9}))
    weight = plugin.weigh(pool("p", features=features), typed("cinder", {}), None)
    assert math.isclose(weight, expected)


def test_the_former_spellings_are_still_read(caplog):
    from cortex.pipeline.config import build_pipelines

    with caplog.at_level(logging.WARNING, logger="cortex.plugins.registry"):
        pipelines = build_pipelines({"defaults": {"cinder": "p"}, "pipelines": {"p": {
            "service": "cinder", "weighers": [{"name": "weigher_pool_utilisation"}]}}})
    assert pipelines.pipelines["p"].weighers[0].name == "weigher_pool_utilization"
    assert "weigher_pool_utilisation is deprecated" in caplog.text
    plugin = PoolUtilizationWeigher(build_options(
        PoolUtilizationWeigher, {"lower_bound": 0.5, "upper_bound": 0.9}))
    old = pool("p", features={"pool.utilisation": 0.7})
    assert math.isclose(plugin.weigh(old, typed("cinder", {}), None), -0.5)
    both = pool("p", features={"pool.utilisation": 0.7, "pool.utilization": 0.9})
    assert plugin.weigh(both, typed("cinder", {}), None) == -1.0


def test_pool_utilization_reads_the_named_feature():
    plugin = PoolUtilizationWeigher(build_options(
        PoolUtilizationWeigher, {"feature": "cpu.busy", "lower_bound": 0.0, "upper_bound": 1.0}))
    state = pool("p", features={"cpu.busy": 0.25, "pool.utilization": 0.9})
    assert plugin.weigh(state, typed("manila", {}), None) == -0.25

"""filter_pool_capabilities: a Cinder volume type's or Manila share type's capabilities."""

import pytest

from cortex.plugins.filters.pool_capabilities import PoolCapabilitiesFilter
from tests.fakes import pool
from tests.unit.plugins.storage import MANILA, NETAPP_HDD, typed, verdict


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

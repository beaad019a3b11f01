"""What the storage plugin tests share: Cinder and Manila types, a typed request, a verdict."""

from cortex.request import CinderRequest, ManilaRequest
from cortex.request.base import Candidate

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

"""The hypervisor facts Nova's capability and image filters read, from Nova's API to the view.

A Nova that still shows ``cpu_info`` (before 2.88) is synced: the node keeps the whole
``cpu_info`` (vendor, model, topology, features in Nova's order) and ``host_ip``;
``supported_instances`` are not in the API, so the view derives libvirt's.
"""

from __future__ import annotations

from cortex.knowledge.loader import load_view
from cortex.rules.image_properties import supported_instances
from cortex.rules.nova_capabilities import capabilities_unmet, node_capabilities
from cortex.sync.runner import run_source
from cortex.sync.sources import build_sources
from tests.sync.conftest import sync_conf


def test_cpu_info_and_host_ip_reach_the_knowledge_view(openstack, sync_engine,
                                                       sync_database_url):
    cloud = openstack.cloud
    root = cloud.add_compute_host("cmp0000", "cmp0000.cloud.example", host_ip="10.0.0.9")
    cloud.add_provider(root, "cmp0000.cloud.example", root, None, {"VCPU": (64, 4.0, 8)})
    cloud.nova_max_microversion = "2.60"
    for source in build_sources(sync_conf(sync_database_url, openstack), ("nova", "placement")):
        result = run_source(sync_engine, source)
        assert result.ok, result.error

    host = load_view(sync_engine).hosts["cmp0000"]
    node = host.all_nodes[0]
    assert dict(node.cpu_info) == cloud.hypervisors[0]["cpu_info"]
    assert node.cpu_info["features"] == ["avx512f", "amx-tile", "vmx"]  # Nova's order
    assert node.host_ip == "10.0.0.9"
    assert node.supported_instances is None
    assert ("i686", "kvm", "hvm") in supported_instances(node)
    capabilities = node_capabilities(host, node, 0)
    for spec, met in (({"capabilities:cpu_info:vendor": "Intel"}, True),
                      ({"capabilities:cpu_info:topology:cores": ">= 56"}, True),
                      ({"capabilities:host_ip": "10.0.0.9"}, True),
                      ({"capabilities:cpu_info:features": "<in> amx"}, True),
                      ({"capabilities:cpu_info:vendor": "AMD"}, False)):
        assert (capabilities_unmet(spec, capabilities) is None) is met, spec

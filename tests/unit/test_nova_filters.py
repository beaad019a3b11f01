"""Nova filters that Nova also has, table by table, each row decided as Nova would.

Rows come from Nova's documented behaviour (admin guide "Compute schedulers" and the
filters' docstrings); where Cortex differs on purpose the row says "Cortex:".
"""

import pytest

from cortex.plugins.base import build_options
from cortex.plugins.filters.aggregate_image_properties_isolation import (
    AggregateImagePropertiesIsolationFilter,
)
from cortex.plugins.filters.aggregate_instance_extra_specs import (
    AggregateInstanceExtraSpecsFilter,
)
from cortex.plugins.filters.aggregate_multitenancy_isolation import (
    AggregateMultiTenancyIsolationFilter,
)
from cortex.plugins.filters.compute_capabilities import ComputeCapabilitiesFilter
from cortex.plugins.filters.has_enough_capacity import HasEnoughCapacityFilter
from cortex.plugins.filters.image_properties import ImagePropertiesFilter
from cortex.plugins.filters.isolated_hosts import IsolatedHostsFilter
from cortex.plugins.filters.server_group_affinity import ServerGroupAffinityFilter
from cortex.plugins.filters.server_group_anti_affinity import ServerGroupAntiAffinityFilter
from cortex.request.base import Candidate
from tests.fakes import aggregate, host, instance, inventory, migration, nova

PROJECT = "pppppppppppppppppppppppppppppppp"  # the project of every bundled Nova body


def verdict(plugin, state, request, nodes=()):
    return plugin.bind(request, None).check(state, request, Candidate(state.host, nodes, 0.0))


def with_specs(specs):
    return nova(flavor={"extra_specs": specs})


# -- ComputeCapabilitiesFilter ------------------------------------------------------------

CAPABLE = host("h", hypervisor_type="QEMU", hypervisor_version=8002002, host_ip="10.0.0.7",
               cpu_info={"arch": "x86_64", "model": "Icelake-Server", "vendor": "Intel",
                         "topology": {"cells": 2, "sockets": 2, "cores": 16, "threads": 2},
                         "features": ["avx", "avx2", "avx512vnni", "aes", "vmx"]})
FEATURES = "['avx', 'avx2', 'avx512vnni', 'aes', 'vmx']"


@pytest.mark.parametrize("specs, expected", [
    ({}, None),
    ({"capabilities:hypervisor_type": "QEMU"}, None),
    # Nova compares exactly: libvirt's QEMU is not qemu
    ({"capabilities:hypervisor_type": "qemu"},
     "hypervisor_type=QEMU does not meet capabilities:hypervisor_type=qemu"),
    ({"capabilities:hypervisor_type": "s== QEMU"}, None),
    ({"capabilities:hypervisor_version": ">= 8002000"}, None),
    ({"capabilities:hypervisor_version": "< 9000000"},      # '<' is no operator: plain string
     "hypervisor_version=8002002 does not meet capabilities:hypervisor_version=< 9000000"),
    ({"capabilities:hypervisor_version": "= 9000000"},      # '=' is >= for numbers
     "hypervisor_version=8002002 does not meet capabilities:hypervisor_version== 9000000"),
    ({"capabilities:cpu_info:arch": "x86_64"}, None),
    ({"capabilities:cpu_info:vendor": "Intel"}, None),
    ({"capabilities:cpu_info:model": "<in> Icelake"}, None),
    ({"capabilities:cpu_info:topology:cores": ">= 16"}, None),
    ({"capabilities:host_ip": "10.0.0.7"}, None),
    ({"capabilities:cpu_info:arch": "<or> aarch64 <or> x86_64"}, None),
    ({"capabilities:cpu_info:features": "<all-in> aes avx2"}, None),
    # the list is matched as printed: its text, never one element
    ({"capabilities:cpu_info:features": "avx2"},
     f"cpu_info:features={FEATURES} does not meet capabilities:cpu_info:features=avx2"),
    ({"capabilities:cpu_info:features": FEATURES}, None),
    ({"capabilities:cpu_info:features": "<in> avx512"}, None),  # finds avx512vnni
    ({"capabilities:cpu_info:features": "<in> sve"},
     f"cpu_info:features={FEATURES} does not meet "
     "capabilities:cpu_info:features=<in> sve"),
    ({"capabilities:vcpus_total": ">= 64"}, None),          # the fake host has 64 VCPU
    ({"capabilities:free_ram_mb": ">= 300000"},
     "free_ram_mb=262144 does not meet capabilities:free_ram_mb=>= 300000"),
    # a numeric operator on text fails the host (Nova raises)
    ({"capabilities:hypervisor_type": ">= 1"},
     "hypervisor_type=QEMU does not meet capabilities:hypervisor_type=>= 1"),
    # hw:maxphysaddr_bits reads cpu_info's maxphysaddr, which this host does not report
    ({"hw:maxphysaddr_bits": "40"},
     "no capability cpu_info:maxphysaddr:bits for capabilities:cpu_info:maxphysaddr:bits=>= 40"),
    # a capability the host does not have fails it
    ({"capabilities:gpu_model": "H100"}, "no capability gpu_model for capabilities:gpu_model=H100"),
    # other scopes are not this filter's business
    ({"hw:cpu_policy": "dedicated", "trait:HW_CPU_X86_AVX2": "required"}, None),
    # an unscoped key is checked only when it names a Nova HostState attribute
    ({"some_flavor_tag": "x"}, None),
    ({"num_instances": "<= 10"}, None),
    ({"metrics": "x"}, "no capability metrics for metrics=x"),
])
def test_compute_capabilities(specs, expected):
    assert verdict(ComputeCapabilitiesFilter(), CAPABLE, with_specs(specs)) == expected


def test_compute_capabilities_case_insensitive_option():
    plugin = ComputeCapabilitiesFilter(build_options(ComputeCapabilitiesFilter,
                                                     {"case_insensitive": ["hypervisor_type"]}))
    assert verdict(plugin, CAPABLE, with_specs({"capabilities:hypervisor_type": "qemu"})) is None
    assert verdict(plugin, CAPABLE, with_specs({"capabilities:hypervisor_type": "QEMU"})) is None
    assert verdict(plugin, CAPABLE, with_specs({"capabilities:cpu_info:vendor": "intel"}))


def test_compute_capabilities_without_stored_cpu_info_uses_arch_and_flags():
    state = host("old", cpu_features=("avx2", "aes"))
    assert verdict(ComputeCapabilitiesFilter(), state,
                   with_specs({"capabilities:cpu_info:features": "<in> avx2"})) is None
    assert verdict(ComputeCapabilitiesFilter(), state,
                   with_specs({"capabilities:cpu_info:vendor": "Intel"})) is not None


def test_compute_capabilities_agent_cpu_info_without_features_takes_the_flags():
    state = host("agent", cpu_features=("avx2",), cpu_info={"vendor": "AMD"})
    for spec in ({"capabilities:cpu_info:features": "<in> avx2"},
                 {"capabilities:cpu_info:vendor": "AMD"}, {"capabilities:cpu_info:arch": "x86_64"}):
        assert verdict(ComputeCapabilitiesFilter(), state, with_specs(spec)) is None, spec


def test_compute_capabilities_reads_the_compute_nodes_stats():
    state = host("busy", instances=[instance("i1", "pa"), instance("i2", "pa"),
                                    instance("i3", "pb", task_state="image_snapshot")])
    for spec, met in (({"capabilities:num_vm_active": "3"}, True),
                      ({"capabilities:num_proj_pa": ">= 2"}, True),
                      ({"num_task_None": "2"}, True),                 # unscoped stat
                      ({"capabilities:io_workload": "1"}, True),
                      ({"capabilities:num_proj_pc": ">= 0"}, False),  # no such stat
                      ({"num_proj_pc": "1"}, True)):                  # unscoped, absent: skipped
        assert (verdict(ComputeCapabilitiesFilter(), state, with_specs(spec)) is None) is met


def test_compute_capabilities_any_named_node():
    inventories = {"VCPU": inventory(8)}
    state = host("vc", hypervisor_type="VMware vCenter Server",
                 nodes={"cluster-a": inventories, "cluster-b": {"VCPU": inventory(128)}})
    request = with_specs({"capabilities:vcpus_total": ">= 100"})
    assert verdict(ComputeCapabilitiesFilter(), state, request, ("cluster-a",)) is not None
    assert verdict(ComputeCapabilitiesFilter(), state, request, ("cluster-a", "cluster-b")) \
        is None


# -- ImagePropertiesFilter ----------------------------------------------------------------

LIBVIRT = None  # derived: x86_64 and i686 under kvm and qemu, hvm
VCENTER = [["x86_64", "vmware", "hvm"], ["i686", "vmware", "hvm"]]
XEN = [["x86_64", "xen", "xen"], ["x86_64", "xen", "hvm"]]


@pytest.mark.parametrize("props, hv_type, arch, supported, version, expected", [
    ({}, "QEMU", "x86_64", LIBVIRT, 8002002, None),
    ({"img_hv_type": "kvm"}, "QEMU", "x86_64", LIBVIRT, 8002002, None),
    ({"img_hv_type": "qemu"}, "QEMU", "x86_64", LIBVIRT, 8002002, None),
    ({"hypervisor_type": "KVM"}, "QEMU", "x86_64", LIBVIRT, 8002002, None),  # legacy name
    ({"img_hv_type": "vmware"}, "QEMU", "x86_64", LIBVIRT, 8002002,
     "no supported instance runs vmware"),
    ({"img_hv_type": "vmware"}, "VMware vCenter Server", "x86_64", VCENTER, 8000003, None),
    ({"img_hv_type": "kvm"}, "VMware vCenter Server", "x86_64", VCENTER, 8000003,
     "no supported instance runs kvm"),
    ({"hw_architecture": "x86_64"}, "QEMU", "x86_64", LIBVIRT, 8002002, None),
    ({"hw_architecture": "amd64"}, "QEMU", "x86_64", LIBVIRT, 8002002, None),  # canonicalised
    ({"hw_architecture": "i686"}, "QEMU", "x86_64", LIBVIRT, 8002002, None),  # libvirt: i686
    ({"architecture": "aarch64"}, "QEMU", "x86_64", LIBVIRT, 8002002,
     "no supported instance runs aarch64"),
    ({"hw_architecture": "x86_64"}, "QEMU", None, LIBVIRT, 8002002,   # nothing advertised
     "the node reports no supported instances for x86_64"),
    ({"hw_vm_mode": "hvm"}, "QEMU", "x86_64", LIBVIRT, 8002002, None),
    ({"hw_vm_mode": "xen"}, "QEMU", "x86_64", LIBVIRT, 8002002,
     "no supported instance runs xen"),
    ({"hw_vm_mode": "pv"}, "xen", "x86_64", XEN, 4001000, None),       # pv is xen
    ({"hw_vm_mode": "exe"}, "QEMU", "x86_64", LIBVIRT, 8002002,
     "no supported instance runs exe"),
    ({"hw_architecture": "x86_64", "img_hv_requested_version": ">=8.0"}, "QEMU", "x86_64",
     LIBVIRT, 8002002, None),
    ({"hw_architecture": "x86_64", "img_hv_requested_version": ">=8.0, <8.2"}, "QEMU",
     "x86_64", LIBVIRT, 8002002, "hypervisor version 8.2.2 does not meet >=8.0, <8.2"),
    ({"hw_architecture": "x86_64", "img_hv_requested_version": "==8.2.2"}, "QEMU", "x86_64",
     LIBVIRT, 8002002, None),
    ({"hw_architecture": "x86_64", "img_hv_requested_version": "==9"}, "QEMU", "x86_64",
     LIBVIRT, 9000000, None),                                          # 9.0.0 is 9
    ({"hw_architecture": "x86_64", "img_hv_requested_version": "newest"}, "QEMU", "x86_64",
     LIBVIRT, 8002002, "unreadable img_hv_requested_version 'newest'"),
    # no version reported: the version is not checked (as Nova)
    ({"hw_architecture": "x86_64", "img_hv_requested_version": ">=99"}, "QEMU", "x86_64",
     LIBVIRT, None, None),
])
def test_image_properties(props, hv_type, arch, supported, version, expected):
    state = host("h", hypervisor_type=hv_type, cpu_arch=arch, hypervisor_version=version,
                 supported_instances=supported)
    request = nova(spec={"image": {"properties": props}})
    assert ImagePropertiesFilter().applies(request) is bool(props)
    if props:
        assert verdict(ImagePropertiesFilter(), state, request) == expected


def test_image_properties_version_alone_is_not_checked():
    """Nova skips the version when the image names no architecture, hv type or VM mode."""
    state = host("h", hypervisor_version=8002002)
    request = nova(spec={"image": {"properties": {"img_hv_requested_version": ">=99"}}})
    assert not ImagePropertiesFilter().applies(request)
    assert verdict(ImagePropertiesFilter(), state, request) is None


def test_image_properties_default_architecture_option():
    plugin = ImagePropertiesFilter(build_options(ImagePropertiesFilter,
                                                 {"default_architecture": "aarch64"}))
    request = nova(spec={"image": {"properties": {}}})
    assert plugin.applies(request)
    assert verdict(plugin, host("h"), request) == "no supported instance runs aarch64"


def test_image_properties_runs_on_rebuild():
    assert ImagePropertiesFilter.run_on_rebuild


# -- AggregateInstanceExtraSpecsFilter ----------------------------------------------------

SSD = aggregate("a1", ssd="true", tier="gold,silver", cpu_ratio="4.0")
OTHER = aggregate("a2", tier="bronze")


@pytest.mark.parametrize("aggregates, specs, expected", [
    ((SSD,), {}, None),
    ((SSD,), {"aggregate_instance_extra_specs:ssd": "true"}, None),
    ((SSD,), {"aggregate_instance_extra_specs:ssd": "false"},
     "ssd=true does not meet aggregate_instance_extra_specs:ssd=false"),
    ((), {"aggregate_instance_extra_specs:ssd": "true"},
     "no capability ssd for aggregate_instance_extra_specs:ssd=true"),
    # unscoped keys are checked too (Nova recommends the scope to avoid clashes)
    ((SSD,), {"ssd": "true"}, None),
    ((OTHER,), {"ssd": "true"}, "no capability ssd for ssd=true"),
    # other scopes are ignored
    ((), {"hw:cpu_policy": "dedicated", "capabilities:hypervisor_type": "qemu"}, None),
    # comma-separated metadata: any value meets the spec
    ((SSD,), {"aggregate_instance_extra_specs:tier": "silver"}, None),
    # several aggregates: their values together
    ((SSD, OTHER), {"aggregate_instance_extra_specs:tier": "bronze"}, None),
    ((SSD,), {"aggregate_instance_extra_specs:tier": "<or> bronze <or> gold"}, None),
    ((SSD,), {"aggregate_instance_extra_specs:cpu_ratio": ">= 2"}, None),
    ((SSD,), {"aggregate_instance_extra_specs:cpu_ratio": "== 2"},
     "cpu_ratio=4.0 does not meet aggregate_instance_extra_specs:cpu_ratio=== 2"),
    ((SSD,), {"aggregate_instance_extra_specs:tier": "s== gold"}, None),
])
def test_aggregate_instance_extra_specs(aggregates, specs, expected):
    state = host("h", aggregates=aggregates)
    request = with_specs(specs)
    if not AggregateInstanceExtraSpecsFilter().applies(request):
        assert expected is None
        return
    assert verdict(AggregateInstanceExtraSpecsFilter(), state, request) == expected


# -- AggregateMultiTenancyIsolation ------------------------------------------------------

@pytest.mark.parametrize("metadata_sets, project, passes", [
    ((), "any", True),                                          # no aggregate: open
    (({"other": "x"},), "any", True),                           # no key: open
    (({"filter_tenant_id": "t1"},), "t1", True),
    (({"filter_tenant_id": "t1"},), "t2", False),
    (({"filter_tenant_id": "t1,t2"},), "t2", True),             # comma-separated list
    (({"filter_tenant_id": "t1, t2"},), "t2", True),
    (({"filter_tenant_id1": "t3"},), "t3", True),               # suffixed keys
    (({"filter_tenant_id": "t1", "filter_tenant_id2": "t3"},), "t3", True),
    (({"filter_tenant_id1": "t3"},), "t1", False),
    (({"filter_tenant_id": "t1"}, {"filter_tenant_id": "t2"}), "t2", True),  # either aggregate
    (({"filter_tenant_id": "t1"}, {"ssd": "true"}), "t2", False),
    (({"filter_tenant_id": ""},), "t1", False),                 # an empty value: nobody
])
def test_aggregate_multitenancy_isolation(metadata_sets, project, passes):
    aggregates = [aggregate(f"a{i}", **m) for i, m in enumerate(metadata_sets)]
    state = host("h", aggregates=aggregates)
    result = verdict(AggregateMultiTenancyIsolationFilter(), state,
                     nova(spec={"project_id": project}))
    assert (result is None) is passes


# -- AggregateImagePropertiesIsolation / IsolatedHostsFilter ------------------------------

@pytest.mark.parametrize("metadata, props, options, passes", [
    ({}, {"hw_architecture": "x86_64"}, {}, True),
    ({"hw_architecture": "x86_64,aarch64"}, {"hw_architecture": "aarch64"}, {}, True),
    ({"hw_architecture": "x86_64"}, {"hw_architecture": "aarch64"}, {}, False),
    ({"hw_architecture": "x86_64"}, {}, {}, True),                  # the image sets none
    ({"os_distro": "rhel"}, {"os_distro": "ubuntu"}, {}, False),
    ({"hw_maxphysaddr_bits": "40"}, {"hw_maxphysaddr_bits": 40}, {}, True),  # str(value)
    ({"hw_architecture": "x86_64"}, {"hw_architecture": "aarch64"},
     {"namespace": "isolate"}, True),                               # keys outside: not read
])
def test_aggregate_image_properties_isolation(metadata, props, options, passes):
    plugin = AggregateImagePropertiesIsolationFilter(
        build_options(AggregateImagePropertiesIsolationFilter, options))
    state = host("h", aggregates=[aggregate("a1", **metadata)])
    request = nova(spec={"image": {"properties": props}})
    assert (verdict(plugin, state, request) is None) is passes


@pytest.mark.parametrize("hosts, images, restrict, name, image, passes", [
    ([], [], True, "h", "img", True),
    (["h"], [], True, "h", "img", False),          # restricted, no isolated image: closed
    (["h"], [], False, "h", "img", True),
    (["h"], ["iso"], True, "h", "iso", True),
    (["h"], ["iso"], True, "h", "img", False),
    (["h"], ["iso"], True, "other", "iso", False),
    (["h"], ["iso"], True, "other", "img", True),
    (["h"], ["iso"], False, "h", "img", True),
    (["h"], ["iso"], False, "other", "iso", False),
])
def test_isolated_hosts(hosts, images, restrict, name, image, passes):
    plugin = IsolatedHostsFilter(build_options(IsolatedHostsFilter, {
        "isolated_hosts": hosts, "isolated_images": images,
        "restrict_isolated_hosts_to_isolated_images": restrict}))
    request = nova(spec={"image": {"id": image, "properties": {}}})
    assert (verdict(plugin, host(name), request) is None) is passes


# -- ServerGroupAffinityFilter / ServerGroupAntiAffinityFilter ----------------------------

def group(policy, hosts=(), members=(), rules=None):
    return {"uuid": "g1", "policy": policy, "hosts": list(hosts), "members": list(members),
            "rules": rules or {}}


@pytest.mark.parametrize("policy, group_hosts, name, passes", [
    ("affinity", ["h1"], "h1", True),
    ("affinity", ["h1"], "h2", False),
    ("affinity", ["H1"], "h1", True),
    ("affinity", [], "h2", True),            # first member: any host
])
def test_server_group_affinity(policy, group_hosts, name, passes):
    request = nova(spec={"instance_group": group(policy, group_hosts)})
    plugin = ServerGroupAffinityFilter()
    if not plugin.applies(request):
        assert passes
        return
    assert (verdict(plugin, host(name), request) is None) is passes


def test_server_group_affinity_ignores_other_policies():
    assert not ServerGroupAffinityFilter().applies(
        nova(spec={"instance_group": group("anti-affinity", ["h1"])}))
    assert not ServerGroupAffinityFilter().applies(nova())


@pytest.mark.parametrize("on_host, group_hosts, members, rules, passes", [
    ((), [], ["i1"], {}, True),
    (("i1",), ["h"], ["i1"], {}, False),                       # default max 1
    (("i1", "x"), ["h"], ["i1", "i2"], {"max_server_per_host": "2"}, True),
    (("i1", "i2"), ["h"], ["i1", "i2"], {"max_server_per_host": "2"}, False),
    (("i1", "i2"), ["h"], ["i1", "i2", "i3"], {"max_server_per_host": "3"}, True),
    (("x", "y"), [], ["i1"], {}, True),                         # non-members do not count
    # Cortex: Nova's group.hosts names the host although the knowledge has no instances
    ((), ["h"], [], {}, False),
    ((), ["h"], [], {"max_server_per_host": "2"}, True),
    ((), ["other"], [], {}, True),
    (("i1",), ["h"], ["i1"], {"max_server_per_host": "many"}, False),  # unreadable: 1
])
def test_server_group_anti_affinity(on_host, group_hosts, members, rules, passes):
    state = host("h", instances=[instance(u) for u in on_host])
    request = nova(spec={"instance_group": group("anti-affinity", group_hosts, members, rules)})
    assert ServerGroupAntiAffinityFilter().applies(request)
    assert (verdict(ServerGroupAntiAffinityFilter(), state, request) is None) is passes


def test_server_group_anti_affinity_passes_the_instances_own_host():
    request = nova(spec={"instance_group": group("anti-affinity", ["h"], ["me"]),
                         "instance_uuid": "me"})
    assert verdict(ServerGroupAntiAffinityFilter(), host("h", instances=[instance("me")]),
                   request) is None


def test_server_group_anti_affinity_reason_names_the_limit():
    request = nova(spec={"instance_group": group("anti-affinity", ["h"], [],
                                                 {"max_server_per_host": "1"})})
    assert verdict(ServerGroupAntiAffinityFilter(), host("h"), request) == \
        "anti-affinity group g1 has 1 member(s) on this host (max_server_per_host 1)"


# -- HasEnoughCapacityFilter with in-progress migrations ----------------------------------

FLAVOR = {"vcpus": 4, "memory_mb": 8192, "root_gb": 80, "extra_specs": {}}
ROOMY = {"VCPU": inventory(8), "MEMORY_MB": inventory(16384), "DISK_GB": inventory(100)}


@pytest.mark.parametrize("migrations, expected", [
    ((), None),
    ((migration(source="h", VCPU=4),), None),                   # 4 + 4 <= 8
    ((migration(source="h", VCPU=6),), "VCPU: used 6 + 4 > capacity 8 (incl. 6 for migrations)"),
    ((migration(dest="h", MEMORY_MB=10000),),
     "MEMORY_MB: used 10000 + 8192 > capacity 16384 (incl. 10000 for migrations)"),
    ((migration("m1", VCPU=2), migration("m2", VCPU=3)),
     "VCPU: used 5 + 4 > capacity 8 (incl. 5 for migrations)"),
    ((migration(status="confirmed", VCPU=6),), None),           # finished: claims nothing
    ((migration(status="error", DISK_GB=90),), None),
])
def test_capacity_counts_in_progress_migrations(migrations, expected):
    state = host("h", inventories=ROOMY, migrations=migrations)
    assert verdict(HasEnoughCapacityFilter(), state, nova(flavor=FLAVOR)) == expected


def test_capacity_migrations_can_be_ignored():
    plugin = HasEnoughCapacityFilter(build_options(HasEnoughCapacityFilter,
                                                   {"count_migrations": False}))
    state = host("h", inventories=ROOMY, migrations=[migration(VCPU=6)])
    assert verdict(plugin, state, nova(flavor=FLAVOR)) is None


def test_bundled_body_project_is_the_demo_tenant():
    assert nova().project_id == PROJECT

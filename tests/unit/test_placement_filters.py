"""Filters for where a request may go: destination, live migration, projects, exclusions."""

import pytest

from cortex.plugins.base import build_options
from cortex.plugins.filters.allowed_projects import AllowedProjectsFilter
from cortex.plugins.filters.excluded_hosts import ExcludedHostsFilter
from cortex.plugins.filters.external_customer import ExternalCustomerFilter
from cortex.plugins.filters.live_migration import LiveMigrationFilter
from cortex.plugins.filters.requested_destination import RequestedDestinationFilter
from cortex.request.base import Candidate
from tests.fakes import aggregate, host, nova, view

A, B, C = (aggregate(u) for u in ("agg-a", "agg-b", "agg-c"))


def verdict(plugin, state, request, nodes=(), knowledge=None):
    bound = plugin.bind(request, knowledge or view(state))
    return bound.check(state, request, Candidate(state.host, nodes, 0.0))


def destination(**fields):
    return nova(spec={"requested_destination": fields})


# -- requested destination ----------------------------------------------------------------

@pytest.mark.parametrize("fields, state, nodes, expected", [
    ({"host": "h1"}, host("h1"), (), None),
    ({"host": "H1"}, host("h1"), (), None),
    ({"host": "h1"}, host("h2"), (), "requested destination is host h1"),
    ({"host": "h1", "node": "h1.cloud.example"}, host("h1"), (), None),
    ({"node": "n2"}, host("h1", nodes={"n1": {}, "n2": {}}), (), None),
    ({"node": "n2"}, host("h1", nodes={"n1": {}, "n2": {}}), ("n1",),
     "requested destination is node n2"),
    # one entry: any of its comma-joined aggregates
    ({"aggregates": ["agg-a,agg-b"]}, host("h", aggregates=[B]), (), None),
    ({"aggregates": ["agg-a,agg-b"]}, host("h", aggregates=[C]), (),
     "host is in none of the requested aggregates agg-a,agg-b"),
    # several entries: all of them
    ({"aggregates": ["agg-a", "agg-b"]}, host("h", aggregates=[A, B]), (), None),
    ({"aggregates": ["agg-a", "agg-b"]}, host("h", aggregates=[A]), (),
     "host is in none of the requested aggregates agg-b"),
    ({"aggregates": ["agg-a,agg-c", "agg-b"]}, host("h", aggregates=[C, B]), (), None),
    ({"forbidden_aggregates": ["agg-c"]}, host("h", aggregates=[A]), (), None),
    ({"forbidden_aggregates": ["agg-c"]}, host("h", aggregates=[A, C]), (),
     "host is in forbidden aggregate agg-c"),
    ({"aggregates": ["agg-a"], "forbidden_aggregates": ["agg-a"]}, host("h", aggregates=[A]),
     (), "host is in forbidden aggregate agg-a"),
])
def test_requested_destination(fields, state, nodes, expected):
    request = destination(**fields)
    assert RequestedDestinationFilter().applies(request)
    assert verdict(RequestedDestinationFilter(), state, request, nodes) == expected


def test_requested_destination_skipped_without_one():
    assert not RequestedDestinationFilter().applies(nova())
    assert not RequestedDestinationFilter().applies(destination(aggregates=[]))
    assert RequestedDestinationFilter.run_on_rebuild


# -- live migration -----------------------------------------------------------------------

INTEL = ("HW_CPU_X86_VMX", "HW_CPU_X86_AVX2", "HW_CPU_X86_AVX512F")
SOURCE = host("src", traits=INTEL, cpu_features=("avx2", "avx512f", "vmx"))


def live(source="src"):
    return nova("cpu-live-migrate",
                spec={"scheduler_hints": {"_nova_check_type": ["live_migrate"],
                                          "source_host": [source]}})


@pytest.mark.parametrize("target, expected", [
    (host("t", cpu_features=("avx2", "avx512f", "vmx", "amx")), None),        # superset
    (host("t", cpu_features=("avx2", "vmx")), "lacks the source's CPU feature(s) avx512f"),
    (host("t", cpu_features=("avx2", "avx512f", "vmx"), cpu_arch="aarch64"),
     "architecture aarch64 differs from the source's x86_64"),
    (host("t", cpu_features=("avx2", "avx512f", "vmx"), hypervisor_type="CH"),
     "hypervisor type CH differs from the source's QEMU"),
    (host("src", cpu_features=("avx2", "avx512f", "vmx")), "host is the live migration's source"),
])
def test_live_migration(target, expected):
    knowledge = view(SOURCE, target) if target.host != "src" else view(SOURCE)
    assert verdict(LiveMigrationFilter(), target, live(), knowledge=knowledge) == expected


def test_live_migration_falls_back_to_cpu_traits():
    source = host("src", traits=INTEL)
    amd = host("t", traits=("HW_CPU_X86_SVM", "HW_CPU_X86_AVX2", "HW_CPU_X86_AVX512F"))
    intel = host("t", traits=INTEL + ("HW_CPU_X86_AMX",))
    assert verdict(LiveMigrationFilter(), amd, live(), knowledge=view(source, amd)) == \
        "lacks the source's CPU feature(s) HW_CPU_X86_VMX"
    assert verdict(LiveMigrationFilter(), intel, live(), knowledge=view(source, intel)) is None


def test_live_migration_unknown_source_passes_everything():
    target = host("t", cpu_features=("sse",))
    assert verdict(LiveMigrationFilter(), target, live("gone"), knowledge=view(target)) is None


def test_live_migration_may_keep_the_source():
    plugin = LiveMigrationFilter(build_options(LiveMigrationFilter, {"exclude_source": False}))
    assert verdict(plugin, SOURCE, live(), knowledge=view(SOURCE)) is None


def test_live_migration_applies_to_live_migrations_with_a_source_only():
    assert LiveMigrationFilter().applies(live())
    assert not LiveMigrationFilter().applies(nova())
    assert not LiveMigrationFilter().applies(nova("cpu-resize"))


def test_live_migration_bind_leaves_the_configured_plugin_alone():
    plugin = LiveMigrationFilter()
    bound = plugin.bind(live(), view(SOURCE))
    assert bound is not plugin and bound.source is SOURCE and plugin.source is None


# -- allowed projects, external customers, static exclusions -----------------------------

@pytest.mark.parametrize("allowed, metadata, project, passes", [
    ((), {}, "p1", True),
    (("p1",), {}, "p1", True),
    (("p1",), {}, "p2", False),
    ((), {"allowed_projects": "p2,p3"}, "p3", True),
    ((), {"allowed_projects": "p2,p3"}, "p1", False),
    (("p1",), {"allowed_projects": "p2"}, "p2", True),   # both sources together
])
def test_allowed_projects(allowed, metadata, project, passes):
    state = host("h", allowed_projects=allowed, aggregates=[aggregate("a", **metadata)])
    result = verdict(AllowedProjectsFilter(), state, nova(spec={"project_id": project}))
    assert (result is None) is passes


def customer(domain):
    return nova(spec={"scheduler_hints": {"domain_name": [domain]}})


@pytest.mark.parametrize("domain, traits, applies, passes", [
    ("iaas-acme", ("CUSTOM_EXTERNAL_CUSTOMER_SUPPORTED",), True, True),
    ("iaas-acme", (), True, False),
    ("iaas-internal", (), False, True),        # ignored domain name
    ("monsoon3", (), False, True),             # an internal domain
])
def test_external_customer(domain, traits, applies, passes):
    plugin = ExternalCustomerFilter(build_options(
        ExternalCustomerFilter, {"ignored_domain_names": ["iaas-internal"]}))
    request = customer(domain)
    assert plugin.applies(request) is applies
    if applies:
        assert (verdict(plugin, host("h", traits=traits), request) is None) is passes


def test_external_customer_needs_a_domain_hint():
    assert not ExternalCustomerFilter().applies(nova())


@pytest.mark.parametrize("patterns, name, expected", [
    (["cmp0005"], "cmp0005", "host matches excluded cmp0005"),
    (["cmp0005"], "cmp0006", None),
    (["nova-compute-bb*"], "nova-compute-bb0003", "host matches excluded nova-compute-bb*"),
    (["CMP00[0-4]?"], "cmp0042", "host matches excluded CMP00[0-4]?"),
    (["cmp00[0-4]?"], "cmp0052", None),
])
def test_excluded_hosts(patterns, name, expected):
    plugin = ExcludedHostsFilter(build_options(ExcludedHostsFilter, {"hosts": patterns}))
    assert verdict(plugin, host(name), nova()) == expected


def test_excluded_hosts_empty_list_does_not_run():
    assert not ExcludedHostsFilter().applies(nova())

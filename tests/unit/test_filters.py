"""Filters, table by table: each row is a host (or pool), a request and the expected verdict."""

import dataclasses

import pytest

from cortex.plugins.base import build_options
from cortex.plugins.filters.capacity import CapacityFilter
from cortex.plugins.filters.correct_az import CorrectAzFilter
from cortex.plugins.filters.has_enough_capacity import HasEnoughCapacityFilter
from cortex.plugins.filters.has_requested_traits import HasRequestedTraitsFilter
from cortex.plugins.filters.host_instructions import HostInstructionsFilter
from cortex.plugins.filters.status import StatusFilter
from cortex.request.base import Candidate
from cortex.rules.capacity import CapacityTable
from tests.fakes import host, inventory, nova, pool, storage
from tests.fakes import view as fake_view


def verdict(plugin, state, request, nodes=()):
    name = getattr(state, "host", None) or state.name
    return plugin.check(state, request, Candidate(name, nodes, 0.0))


@pytest.mark.parametrize("spec, name, nodes, expected", [
    ({"ignore_hosts": ["cmp0001"]}, "cmp0001", (), "host is in ignore_hosts"),
    ({"ignore_hosts": ["CMP0001"]}, "cmp0001", (), "host is in ignore_hosts"),
    ({"ignore_hosts": ["cmp0001"]}, "cmp0002", (), None),
    ({"force_hosts": ["cmp0002"]}, "cmp0002", (), None),
    ({"force_hosts": ["cmp0002"]}, "cmp0003", (), "host is not in force_hosts"),
    ({"force_hosts": ["cmp0002"], "ignore_hosts": ["cmp0002"]}, "cmp0002", (),
     "host is in ignore_hosts"),
    ({"force_nodes": ["cmp0004.cloud.example"]}, "cmp0004", ("cmp0004.cloud.example",), None),
    ({"force_nodes": ["cmp0004.cloud.example"]}, "cmp0005", ("cmp0005.cloud.example",),
     "no node of the host is in force_nodes"),
    # node names compare exactly, as in Nova's HostManager (host names do not)
    ({"force_nodes": ["CMP0004.cloud.example"]}, "cmp0004", ("cmp0004.cloud.example",),
     "no node of the host is in force_nodes"),
])
def test_host_instructions(spec, name, nodes, expected):
    request = nova(spec=spec)
    assert HostInstructionsFilter().applies(request)
    assert verdict(HostInstructionsFilter(), host(name), request, nodes) == expected


def test_host_instructions_do_not_apply_without_instructions():
    assert not HostInstructionsFilter().applies(nova())


@pytest.mark.parametrize("host_az, requested, default, expected", [
    ("az-1", "az-1", "nova", None),
    ("az-2", "az-1", "nova", "availability zone az-2 is not the requested az-1"),
    (None, "nova", "nova", None),            # no AZ aggregate: Nova's default zone
    (None, "az-1", "nova", "availability zone nova is not the requested az-1"),
    (None, "internal", "internal", None),
])
def test_correct_az_nova(host_az, requested, default, expected):
    plugin = CorrectAzFilter(build_options(CorrectAzFilter,
                                           {"default_availability_zone": default}))
    assert verdict(plugin, host("h", az=host_az), nova(spec={"availability_zone": requested})
                   ) == expected


def test_correct_az_skipped_without_zone():
    assert not CorrectAzFilter().applies(nova(spec={"availability_zone": None}))


def test_correct_az_storage_uses_zone_list():
    request = storage("manila", "create-share-nfs")  # asks eu-de-1b or eu-de-1a
    assert verdict(CorrectAzFilter(), pool("p", az="eu-de-1b"), request) is None
    assert "eu-de-2" in verdict(CorrectAzFilter(), pool("p", az="eu-de-2"), request)


EU_DE_1A = "9ed89edd-d684-4325-b600-e6129ec04ece"  # the bundled Manila bodies' zone ids
EU_DE_1B = "627bf322-5fac-4cb6-a34a-cb115ee347dd"


@pytest.mark.parametrize("az, az_id, expected", [
    ("eu-de-1a", EU_DE_1A, None),                                 # the requested zone
    ("eu-de-1b", EU_DE_1B,
     f"availability zone id {EU_DE_1B} (eu-de-1b) is not the requested {EU_DE_1A}"),
    (None, EU_DE_1B, f"availability zone id {EU_DE_1B} is not the requested {EU_DE_1A}"),
    ("eu-de-1b", None, None),       # id not known: names only, and the body names none
])
def test_correct_az_manila_compares_the_requested_zone_id(az, az_id, expected):
    request = storage("manila", "create-share-cifs-az")   # availability_zone_id of eu-de-1a
    assert request.availability_zones == ()
    plugin = CorrectAzFilter()
    assert plugin.applies(request)
    state = pool("manila-share-3@netapp#aggr_ssd_1", az=az, az_id=az_id)
    assert verdict(plugin, state, request) == expected
    removed = plugin.check_all([(Candidate(state.name, (), 0.0), state)], request, None)
    assert removed == ({} if expected is None else {state.name: expected})


def test_correct_az_manila_checks_names_and_id_both():
    request = storage("manila", "create-share-cifs-az")
    named = dataclasses.replace(request, availability_zones=("eu-de-1b",))
    plugin = CorrectAzFilter()
    # the id matches, the name is not requested: removed by the name, as Manila does
    assert verdict(plugin, pool("p", az="eu-de-1a", az_id=EU_DE_1A), named) == (
        "availability zone eu-de-1a is not the requested eu-de-1b")
    # the name is requested, the id is another: removed by the id
    assert EU_DE_1B in verdict(plugin, pool("p", az="eu-de-1b", az_id=EU_DE_1B), named)
    # the id unknown: the name decides
    assert verdict(plugin, pool("p", az="eu-de-1b"), named) is None
    # neither a name nor an id requested: the filter does not run
    assert not plugin.applies(dataclasses.replace(request, availability_zone_id=None))


def test_correct_az_memo_key_holds_the_zone_id():
    plugin = CorrectAzFilter()
    cifs = storage("manila", "create-share-cifs-az")
    other = dataclasses.replace(cifs, availability_zone_id=EU_DE_1B)
    assert plugin.memo_key(cifs) != plugin.memo_key(other)
    assert EU_DE_1A in plugin.memo_key(cifs)
    assert plugin.memo_key(cifs) != plugin.memo_key(
        dataclasses.replace(cifs, availability_zone_id=None))



@pytest.mark.parametrize("state, expected", [
    (host("h"), None),
    (host("h", enabled=False, disabled_reason="maintenance"),
     "compute service disabled: maintenance"),
    (host("h", enabled=False), "compute service disabled"),
    (host("h", up=False), "compute service is down"),
    (host("h", traits=["COMPUTE_STATUS_DISABLED"]), "host has trait COMPUTE_STATUS_DISABLED"),
])
def test_status(state, expected):
    assert verdict(StatusFilter(), state, nova()) == expected


@pytest.mark.parametrize("traits, extra_specs, expected", [
    ((), {}, None),
    (("CUSTOM_HANA_EXCLUSIVE_HOST",), {"trait:CUSTOM_HANA_EXCLUSIVE_HOST": "required"}, None),
    ((), {"trait:CUSTOM_HANA_EXCLUSIVE_HOST": "required"},
     "missing required trait CUSTOM_HANA_EXCLUSIVE_HOST"),
    (("HW_GPU_X",), {"trait1:HW_GPU_X": "forbidden"}, "has forbidden trait HW_GPU_X"),
    (("COMPUTE_STATUS_DISABLED",), {}, "has forbidden trait COMPUTE_STATUS_DISABLED"),
])
def test_requested_traits(traits, extra_specs, expected):
    request = nova(flavor={"extra_specs": extra_specs})  # root_forbidden has STATUS_DISABLED
    assert verdict(HasRequestedTraitsFilter(), host("h", traits=traits), request) == expected


def test_requested_traits_root_required():
    params = {"nova_object.data": {"root_required": ["CUSTOM_X"], "root_forbidden": []}}
    request = nova(spec={"request_level_params": params})
    assert verdict(HasRequestedTraitsFilter(), host("h"), request) == \
        "missing required trait CUSTOM_X"
    assert verdict(HasRequestedTraitsFilter(), host("h", traits=["CUSTOM_X"]), request) is None


FLAVOR = {"vcpus": 4, "memory_mb": 8192, "root_gb": 80, "extra_specs": {}}


@pytest.mark.parametrize("inventories, flavor, expected", [
    ({"VCPU": inventory(8), "MEMORY_MB": inventory(16384), "DISK_GB": inventory(100)},
     FLAVOR, None),
    # max_unit defaults to total, as Placement's inventories usually have it
    ({"VCPU": inventory(8), "MEMORY_MB": inventory(16384), "DISK_GB": inventory(60)},
     FLAVOR, "DISK_GB: 80 > max_unit 60"),
    # allocation ratio: 8 cores * 4.0 = 32 vCPUs, 30 used, 4 more do not fit
    ({"VCPU": inventory(8, used=30, ratio=4.0), "MEMORY_MB": inventory(16384),
      "DISK_GB": inventory(100)}, FLAVOR, "VCPU: used 30 + 4 > capacity 32"),
    # reserved comes off the total before the ratio
    ({"VCPU": inventory(8), "MEMORY_MB": inventory(16384, reserved=10000),
      "DISK_GB": inventory(100)}, FLAVOR, "MEMORY_MB: used 0 + 8192 > capacity 6384"),
    ({"VCPU": inventory(8), "MEMORY_MB": inventory(16384), "DISK_GB": inventory(60, max_unit=1000)},
     FLAVOR, "DISK_GB: used 0 + 80 > capacity 60"),
    ({"VCPU": inventory(8, max_unit=2), "MEMORY_MB": inventory(16384),
      "DISK_GB": inventory(100)}, FLAVOR, "VCPU: 4 > max_unit 2"),
    ({"VCPU": inventory(8), "MEMORY_MB": inventory(16384, step=3000),
      "DISK_GB": inventory(100)}, FLAVOR, "MEMORY_MB: 8192 not a multiple of step_size 3000"),
    ({"VCPU": inventory(8), "DISK_GB": inventory(100)}, FLAVOR, "no MEMORY_MB inventory"),
    # dedicated CPUs are PCPU: VCPU inventory does not count
    ({"VCPU": inventory(64), "MEMORY_MB": inventory(16384), "DISK_GB": inventory(100)},
     FLAVOR | {"extra_specs": {"hw:cpu_policy": "dedicated"}}, "no PCPU inventory"),
    ({"PCPU": inventory(8), "MEMORY_MB": inventory(16384), "DISK_GB": inventory(100)},
     FLAVOR | {"extra_specs": {"hw:cpu_policy": "dedicated"}}, None),
    # swap (MiB) and ephemeral count as disk: 80 + 10 + ceil(1/1024) = 91 > 90
    ({"VCPU": inventory(8), "MEMORY_MB": inventory(16384), "DISK_GB": inventory(90, max_unit=1000)},
     FLAVOR | {"ephemeral_gb": 10, "swap": 1}, "DISK_GB: used 0 + 91 > capacity 90"),
])
def test_has_enough_capacity(inventories, flavor, expected):
    request = nova(flavor=flavor)
    assert verdict(HasEnoughCapacityFilter(), host("h", inventories=inventories), request) \
        == expected


def test_has_enough_capacity_checks_the_named_node():
    small = {"VCPU": inventory(1), "MEMORY_MB": inventory(1024), "DISK_GB": inventory(10)}
    big = {"VCPU": inventory(64), "MEMORY_MB": inventory(262144), "DISK_GB": inventory(2000)}
    state = host("vc", nodes={"cluster-a": small, "cluster-b": big})
    request = nova(flavor=FLAVOR)
    assert verdict(HasEnoughCapacityFilter(), state, request, ("cluster-a",)) is not None
    assert verdict(HasEnoughCapacityFilter(), state, request, ("cluster-a", "cluster-b")) is None


def test_has_enough_capacity_resource_classes_option():
    plugin = HasEnoughCapacityFilter(build_options(HasEnoughCapacityFilter,
                                                   {"resource_classes": ["VCPU"]}))
    state = host("h", inventories={"VCPU": inventory(8)})
    assert verdict(plugin, state, nova(flavor=FLAVOR)) is None


@pytest.mark.parametrize("state, size, expected", [
    (pool("p", total=1000, free=600), 500, None),
    (pool("p", total=1000, free=400), 500, "free 400 GiB < 500 GiB"),
    # reserved_percentage comes off the free space: 600 - floor(1000 * 0.2) = 400
    (pool("p", total=1000, free=600, reserved=20), 500, "free 400 GiB < 500 GiB"),
    (pool("p", total=0, free=0), 1, "pool reports no capacity"),
])
def test_capacity_thick(state, size, expected):
    request = storage("cinder", "create-volume-default-type", size=size)
    assert verdict(CapacityFilter(), state, request) == expected


def test_capacity_thin_uses_over_subscription():
    thin = pool("p", total=1000, free=300, provisioned=1500, ratio=2.0, thin=True)
    request = storage("cinder", "create-volume-thin-qos", size=400)
    assert verdict(CapacityFilter(), thin, request) is None  # (1500+400)/1000 <= 2, 300*2 >= 400
    too_much = storage("cinder", "create-volume-thin-qos", size=600)
    assert verdict(CapacityFilter(), thin, too_much) == \
        "provisioned ratio 2.10 would exceed max_over_subscription_ratio 2"


def test_capacity_thin_virtual_free():
    thin = pool("p", total=1000, free=100, provisioned=0, ratio=3.0, thin=True)
    request = storage("cinder", "create-volume-thin-qos", size=400)
    assert verdict(CapacityFilter(), thin, request) == "virtual free 300 GiB < 400 GiB"


def test_capacity_skips_extend():
    assert not CapacityFilter().applies(storage("cinder", "extend-volume"))
    assert CapacityFilter().applies(storage("cinder", "create-volume-thin-qos"))


def _capacity_fleet(count=24):
    """Hosts of 8 vCPUs, every third one full."""
    return [host(f"h{i:02d}", inventories={
        "VCPU": inventory(8, used=8 if i % 3 == 0 else 0), "MEMORY_MB": inventory(16384),
        "DISK_GB": inventory(100)}) for i in range(count)]


@pytest.mark.parametrize("asked", [range(2), range(0, 24, 4), range(24)])
def test_has_enough_capacity_batch_is_the_host_by_host_verdict(asked):
    """Few hosts asked (checked one by one) or many (the view's capacity tables): same answer."""
    fleet = _capacity_fleet()
    knowledge = fake_view(*fleet)
    request = nova(flavor=FLAVOR, hosts=[h.host for h in fleet])
    pairs = [(request.candidates[i], fleet[i]) for i in asked]
    plugin = HasEnoughCapacityFilter()
    expected = {c.host: reason for c, state in pairs
                if (reason := plugin.check(state, request, c)) is not None}
    assert expected  # a full host among them
    assert plugin.check_all(pairs, request, knowledge) == expected


def test_has_enough_capacity_builds_no_table_for_a_few_hosts(monkeypatch):
    """Two hosts of 24 are checked directly: the table's walk over every host is not paid."""
    import cortex.plugins.filters.has_enough_capacity as module

    built = []

    def table(view, rc):
        built.append(rc)
        return CapacityTable(view, rc)

    monkeypatch.setattr(module, "CapacityTable", table)
    fleet = _capacity_fleet()
    knowledge = fake_view(*fleet)
    request = nova(flavor=FLAVOR, hosts=[h.host for h in fleet])
    plugin = HasEnoughCapacityFilter()
    plugin.check_all([(request.candidates[i], fleet[i]) for i in range(2)], request, knowledge)
    assert built == []
    plugin.check_all(list(zip(request.candidates, fleet, strict=True)), request, knowledge)
    assert built

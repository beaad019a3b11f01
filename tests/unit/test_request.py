"""Request parsing: every bundled body into its typed, read-only request."""

import dataclasses

import pytest

from cortex.request import (
    PARSERS,
    BadRequest,
    Candidate,
    CandidateList,
    CinderRequest,
    ManilaRequest,
    NovaRequest,
)
from tests.conftest import FIXTURES, bodies, load_body
from tests.fakes import nova, nova_body


@pytest.mark.parametrize("service, path", [(s, p) for s in PARSERS for p in bodies(s)],
                         ids=lambda v: getattr(v, "stem", v))
def test_every_bundled_body_parses(service, path):
    body = load_body(path)
    request = PARSERS[service](body)
    assert request.service == service
    assert [c.host for c in request.candidates] == list(dict.fromkeys(
        h["host"] for h in body["hosts"]))
    assert request.request_id == body["context"]["request_id"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.service = "x"


def test_nova_pinned_gpu_request():
    request = NovaRequest.from_body(load_body(FIXTURES / "nova" / "gpu-2xh100-pinned.json"))
    assert request.flavor.vcpus == 32 and request.cpu_policy == "dedicated"
    assert request.resources == {"PCPU": 32, "MEMORY_MB": 262144, "DISK_GB": 200}
    cell = request.numa_cells[0]
    assert cell.pcpuset == frozenset(range(32)) and cell.pagesize == 1048576
    pci = request.pci_requests[0]
    assert (pci.count, pci.alias_name, pci.numa_policy) == (2, "h100", "required")
    assert pci.spec[0]["product_id"] == "2330"
    assert request.root_forbidden == {"COMPUTE_STATUS_DISABLED"}
    assert request.image_properties["hw_architecture"] == "x86_64"
    assert request.intent == "create" and request.availability_zone == "az-1"
    with pytest.raises(TypeError):
        request.flavor.extra_specs["x"] = "y"


@pytest.mark.parametrize("fixture, intent", [
    ("cpu-live-migrate", "live_migrate"), ("cpu-resize", "resize"),
    ("cpu-evacuate", "evacuate"), ("cpu-general-purpose", "create"),
])
def test_nova_intent_from_check_type_hint(fixture, intent):
    assert nova(fixture).intent == intent


def test_nova_intent_falls_back_to_legacy_flags():
    request = nova(spec={"scheduler_hints": {}}, live=True)
    assert request.intent == "live_migrate" and request.live


def test_nova_scalar_hint_is_accepted():
    request = nova(spec={"scheduler_hints": {"source_host": "cmp0003", "n": 3}})
    assert request.scheduler_hints == {"source_host": ("cmp0003",), "n": ("3",)}


def test_nova_server_group_and_instructions():
    group = nova("multi-create-anti-affinity").server_group
    assert (group.policy, group.hosts, group.rules) == ("anti-affinity", ("cmp0005",),
                                                        {"max_server_per_host": "1"})
    request = nova("force-and-ignore-hosts")
    assert request.force_hosts == ("cmp0002", "cmp0004") and request.ignore_hosts == ("cmp0001",)
    dest = nova("requested-destination-aggregates").requested_destination
    assert dest.aggregates == (("11111111-2222-3333-4444-555555555555",
                                "66666666-7777-8888-9999-000000000000"),)


def test_nova_resources_rules():
    extra = {"resources:VGPU": "1", "resources1:CUSTOM_X": "2", "resources:DISK_GB": "0"}
    request = nova(flavor={"extra_specs": extra, "swap": 2049, "ephemeral_gb": 5})
    assert request.resources == {"VCPU": 4, "MEMORY_MB": 8192, "VGPU": 1, "CUSTOM_X": 2}
    bfv = nova(flavor={"swap": 1024, "ephemeral_gb": 5}, spec={"is_bfv": True})
    assert bfv.resources["DISK_GB"] == 6  # root disk is a volume: ephemeral + swap only


def test_nova_traits_from_extra_specs():
    request = nova(flavor={"extra_specs": {"trait:A": "required", "trait2:B": "forbidden",
                                           "trait:C": "sometimes"}})
    assert request.required_traits == {"A"} and request.forbidden_traits == {"B"}


def test_duplicate_host_entries_merge_into_one_candidate():
    body = nova_body(hosts=["a", "b"])
    body["hosts"].append({"host": "a", "hypervisor_hostname": "a-second"})
    request = NovaRequest.from_body(body)
    assert [c.host for c in request.candidates] == ["a", "b"]
    assert request.candidates[0].nodes == ("a.cloud.example", "a-second")


@pytest.mark.parametrize("order", [("a", "b", "c"), ("c", "a", "b")], ids=["nova", "other"])
def test_candidates_read_as_columns_and_as_candidate_tuples(order):
    # Nova lists its weights in its hosts' order (a faster path), Cinder and Manila not
    body = nova_body(hosts=["a", "b", "c"])
    body["hosts"][1].pop("hypervisor_hostname")          # Cinder and Manila name no node
    body["hosts"][2]["hypervisor_hostname"] = ""
    body["weights"] = {host: {"a": 2, "b": -1.5, "c": 0}[host] for host in order}
    candidates = NovaRequest.from_body(body).candidates
    assert candidates.hosts == ("a", "b", "c")
    assert candidates.nodes == (("a.cloud.example",), (), ())
    assert candidates.weights == (2.0, -1.5, 0.0)
    assert all(type(w) is float for w in candidates.weights)
    expected = (Candidate("a", ("a.cloud.example",), 2.0), Candidate("b", (), -1.5),
                Candidate("c", (), 0.0))
    assert tuple(candidates) == expected and candidates == expected
    assert candidates[1] == expected[1] and candidates[-1] == expected[2]
    assert candidates[1:] == expected[1:] and len(candidates) == 3
    assert list(candidates.take([2, 0])) == [expected[2], expected[0]]
    assert type(candidates[0]) is Candidate and candidates[0].host == "a"
    assert candidates == NovaRequest.from_body(body).candidates
    assert hash(candidates) == hash(NovaRequest.from_body(body).candidates)
    body["weights"]["a"] = 3
    assert candidates != NovaRequest.from_body(body).candidates
    with pytest.raises(ValueError, match="differ in length"):
        CandidateList(["a"], [], [1.0])
    with pytest.raises(ValueError, match="differ in length"):
        CandidateList.one_node_each(["a"], ["n", "m"], [1.0])
    assert CandidateList.one_node_each(["a", "b"], ["n", None], [1.0, 2.0]) == CandidateList(
        ["a", "b"], [("n",), ()], [1.0, 2.0])


@pytest.mark.parametrize("change, message", [
    (lambda b: b["weights"].pop("b"), "hosts without a weight: b"),
    (lambda b: b["weights"].update(z=1.0), "weights for hosts not in 'hosts': z"),
    (lambda b: b.update(weights={"z": 1.0, **b["weights"]}), "weights for hosts not in 'hosts': z"),
    (lambda b: b.update(weights={"b": 1.0, "z": 1.0}), "hosts without a weight: a"),
    (lambda b: b["hosts"].append({"host": "c"}), "hosts without a weight: c"),
])
def test_weights_must_match_hosts(change, message):
    body = nova_body(hosts=["a", "b"])
    change(body)
    with pytest.raises(BadRequest, match=message):
        NovaRequest.from_body(body)


def test_cinder_fields():
    body = load_body(FIXTURES / "cinder" / "create-volume-thin-qos.json")
    request = CinderRequest.from_body(body)
    assert (request.operation, request.size, request.availability_zones) == (
        "create_volume", 512, ("eu-de-1a",))
    assert request.volume_type.extra_specs["provisioning:type"] == "thin"
    assert request.resource_id == "b788c2b1-f332-4cb4-b288-ad316e472364"
    retype = CinderRequest.from_body(load_body(FIXTURES / "cinder" / "retype-on-demand.json"))
    assert retype.intent == "retype_volume" and retype.migration_policy == "on-demand"


def test_cinder_versioned_object_envelope_is_unwrapped():
    body = load_body(FIXTURES / "cinder" / "create-volume-thin-qos.json")
    body["spec"] = {"versioned_object.name": "RequestSpec", "versioned_object.data": body["spec"]}
    assert CinderRequest.from_body(body).size == 512


def test_manila_fields():
    replica = ManilaRequest.from_body(load_body(FIXTURES / "manila" / "create-share-replica.json"))
    assert replica.intent == "create_replica"
    assert replica.all_replica_hosts == ("manila-share-2@netapp#aggr_ssd_1",)
    nfs = ManilaRequest.from_body(load_body(FIXTURES / "manila" / "create-share-nfs.json"))
    assert (nfs.size, nfs.share_proto, nfs.intent) == (100, "NFS", "create_share")
    assert nfs.availability_zones == ("eu-de-1b", "eu-de-1a")


EU_DE_1A = "9ed89edd-d684-4325-b600-e6129ec04ece"  # the bundled bodies' zone ids
EU_DE_1B = "627bf322-5fac-4cb6-a34a-cb115ee347dd"


def test_manila_requested_zone_id():
    def zone_id(name, change=None):
        body = load_body(FIXTURES / "manila" / f"{name}.json")
        if change:
            change(body["spec"])
        return ManilaRequest.from_body(body).availability_zone_id

    assert zone_id("create-share-cifs-az") == EU_DE_1A
    assert zone_id("create-share-replica") == EU_DE_1B
    assert zone_id("create-share-nfs") is None          # null everywhere: no zone asked
    # Manila's AvailabilityZoneFilter: resource_properties' key first, a null one included
    assert zone_id("create-share-cifs-az",
                   lambda s: s["resource_properties"].update(availability_zone_id=None)) is None
    # without resource_properties: share_instance_properties, which Manila builds them from
    assert zone_id("create-share-cifs-az", lambda s: (
        s.pop("resource_properties"),
        s["share_instance_properties"].update(availability_zone_id=EU_DE_1B))) == EU_DE_1B
    # neither holds the key: the spec's own
    assert zone_id("create-share-cifs-az", lambda s: (
        s["resource_properties"].pop("availability_zone_id"),
        s["share_instance_properties"].pop("availability_zone_id"))) == EU_DE_1A
    # oslo envelopes around the nested objects are unwrapped
    assert zone_id("create-share-cifs-az", lambda s: s.update(resource_properties={
        "versioned_object.data": {"availability_zone_id": EU_DE_1B}})) == EU_DE_1B

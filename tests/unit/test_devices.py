"""Device demand: pci_requests, Nova-format PCI aliases, request groups, device profiles."""

import json

import pytest

from cortex.request import BadRequest
from cortex.request.devices import (
    CatalogError,
    DeviceCatalog,
    device_requests,
    parse_device_profiles,
    parse_pci_aliases,
)
from tests.fakes import nova, nova_body

ALIASES = json.dumps([
    {"name": "a100", "vendor_id": "10DE", "product_id": "20b5", "device_type": "type-PCI"},
    {"name": "a100", "vendor_id": "10de", "product_id": "20b2", "device_type": "type-PCI"},
    {"name": "l40s", "vendor_id": "10de", "product_id": "26b9", "numa_policy": "required"},
])
PROFILES = json.dumps([{"name": "gpu-h100-passthrough", "groups": [
    {"resources:PGPU": "1", "trait:CUSTOM_GPU_NVIDIA": "required",
     "trait:CUSTOM_GPU_PRODUCT_ID_2330": "required"}]}])
CATALOG = DeviceCatalog.from_json(ALIASES, PROFILES)


def test_aliases_follow_novas_rules():
    aliases = parse_pci_aliases(ALIASES)
    assert aliases["a100"].numa_policy == "legacy"  # Nova's default
    assert [dict(s) for s in aliases["a100"].specs] == [
        {"vendor_id": "10de", "product_id": "20b5", "dev_type": "type-PCI"},
        {"vendor_id": "10de", "product_id": "20b2", "dev_type": "type-PCI"}]
    assert aliases["l40s"].numa_policy == "required"
    assert parse_pci_aliases(json.dumps({"name": "x", "product_id": "1234"}))["x"].specs[0] == {
        "product_id": "1234"}
    assert parse_pci_aliases("") == {}


@pytest.mark.parametrize("text, message", [
    ("[{\"name\": \"a\", \"numa_policy\": \"required\"}, {\"name\": \"a\"}]", "disagree"),
    ("[{\"name\": \"a\", \"device_type\": \"type-PF\"}, {\"name\": \"a\"}]", "disagree"),
    ("{\"name\": \"a\", \"numa_policy\": \"near\"}", "numa_policy"),
    ("{\"name\": \"a\", \"vendor_id\": \"nvidia\"}", "4 hex digits"),
    ("{\"vendor_id\": \"10de\"}", "without a name"),
    ("[1, 2]", "list of objects"),
    ("{", "not JSON"),
])
def test_bad_aliases_are_refused(text, message):
    with pytest.raises(CatalogError, match=message):
        parse_pci_aliases(text)


def test_bad_profiles_are_refused():
    with pytest.raises(CatalogError, match="name and a list"):
        parse_device_profiles('[{"name": "p", "groups": {}}]')


def test_spec_pci_requests_win_over_the_alias():
    request = nova("gpu-4xl40s-required", devices=CATALOG)
    [wanted] = request.device_requests
    assert (wanted.kind, wanted.count, wanted.numa_policy, wanted.source) == (
        "pci", 4, "required", "pci_requests")


def test_alias_resolves_when_the_spec_has_no_pci_requests():
    body = nova_body("gpu-1xa100-numa", spec={"pci_requests": None},
                     flavor={"extra_specs": {"pci_passthrough:alias": "a100:2, l40s:1",
                                             "hw:pci_numa_affinity_policy": "preferred"}})
    from cortex.request import NovaRequest

    first, second = NovaRequest.from_body(body, devices=CATALOG).device_requests
    assert (first.name, first.count, first.numa_policy, len(first.specs)) == (
        "a100", 2, "preferred", 2)
    assert (second.name, second.numa_policy) == ("l40s", "preferred")
    unresolved = NovaRequest.from_body(body).unresolved_devices
    assert unresolved == ("pci alias a100", "pci alias l40s")


def test_alias_policy_applies_without_a_flavor_override():
    wanted, _ = device_requests((), {"pci_passthrough:alias": "l40s:2"}, {}, CATALOG)
    assert wanted[0].numa_policy == "required"


@pytest.mark.parametrize("specs, expected", [
    ({"resources:VGPU": "1", "trait:CUSTOM_NVIDIA_A100_3G_40GB": "required"},
     [("vgpu", 1, "3g.40gb", ())]),
    ({"resources1:VGPU": "2", "trait1:CUSTOM_A100_1G_10GB": "required",
      "resources2:VGPU": "1"}, [("vgpu", 2, "1g.10gb", ()), ("vgpu", 1, None, ())]),
    ({"resources:PGPU": "2", "trait:CUSTOM_GPU_NVIDIA": "required"},
     [("pci", 2, None, ({"vendor_id": "10de"},))]),
    ({"resources:CUSTOM_PCI_10DE_2330": "8"},
     [("pci", 8, None, ({"vendor_id": "10de", "product_id": "2330"},))]),
    ({"resources:VCPU": "4", "resources:CUSTOM_MAGIC": "1"}, []),
])
def test_request_groups(specs, expected):
    wanted, unresolved = device_requests((), specs, {}, None)
    assert [(w.kind, w.count, w.mig_profile, tuple(dict(s) for s in w.specs)) for w in wanted] \
        == expected
    assert all(w.numa_policy is None for w in wanted) and unresolved == ()


def test_device_profile_resolves_from_configuration():
    request = nova("accel-device-profile", devices=CATALOG)
    [wanted] = request.device_requests
    assert (wanted.kind, wanted.source, wanted.name) == (
        "pci", "accel:device_profile", "gpu-h100-passthrough")
    assert dict(wanted.specs[0]) == {"vendor_id": "10de", "product_id": "2330"}
    assert nova("accel-device-profile").unresolved_devices == (
        "accel:device_profile gpu-h100-passthrough",)


@pytest.mark.parametrize("specs", [
    {"pci_passthrough:alias": "a100"}, {"pci_passthrough:alias": "a100:0"},
    {"pci_passthrough:alias": "a100:1", "hw:pci_numa_affinity_policy": "nearby"},
])
def test_malformed_alias_extra_specs_are_bad_requests(specs):
    with pytest.raises(BadRequest):
        device_requests((), specs, {}, CATALOG)
